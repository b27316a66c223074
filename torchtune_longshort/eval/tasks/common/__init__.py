"""What every task of the pack shares: the length grammar (:mod:`.lengths`), the "cannot be scored, and why"
protocol (:mod:`.unavailable`), the task class (:mod:`.pack_task`) and long texts sized in the model's tokens
(:mod:`.long_text`, cut with the model's tokenizer by :mod:`.token_sequences`)."""
