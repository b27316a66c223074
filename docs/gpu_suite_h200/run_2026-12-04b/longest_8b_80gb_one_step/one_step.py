"""One step of the 8B LoRA shape at the 80 GB cap's predicted longest window (pageable offloading)."""
import json, sys, time
sys.path[:0] = ["benchmarks"]
import torch
import memory_model as mm
import gpu_loss_parts as g
cap = float(sys.argv[1]) * 1e9
L = int(sys.argv[2]) if len(sys.argv) > 2 else 0
mm._MODEL["gpu"] = g._gpu_model_of(mm, "8b-lora", None)
pred_L = mm.predict_longest("8b-lora", cap, True, None, tile=mm.TILE_GPU)
L = L or pred_L
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total))
print(f"cap {cap/1e9} GB, predicted longest {pred_L}, running L={L}", flush=True)
r = mm.run_step("8b-lora", L, "cuda", offload=True, num_chunks=None, tile=mm.TILE_GPU, pin_memory=False)
r["predicted_bytes"], r["predicted_phase"] = mm.predict_bytes("8b-lora", L, True, None, tile=mm.TILE_GPU)
r.update(cap_bytes=cap, predicted_L=pred_L, reserved_peak=torch.cuda.max_memory_reserved())
print(json.dumps(r), flush=True)
