"""Hand mutants of synthetic/experiments.py that survived test_synthetic_replot, test_synthetic_refusals and
test_synthetic_cache (mutants15).

References: the MSEs the runs measured (what --replot redraws from fig<name>.csv: each within the 6 significant
digits the CSV keeps, relative 5e-6), and the theory curve's own budget floor (150 steps, the App. C.1 model's
least-squares optimum needs them whatever --steps a quick run gives the transformer)."""

from __future__ import annotations

import numpy as np

from torchtune_longshort.synthetic.experiments import _csv_bytes, figure_curves, read_figure_csv
from torchtune_longshort.synthetic.train import RunConfig


def test_the_figure_csv_keeps_each_mse_to_six_digits(tmp_path):
    rng = np.random.default_rng(0)
    mse = [rng.uniform(1e-4, 1e3, 6), rng.uniform(1e-4, 1e3, 6)]
    fig = {"NoPE": {"lengths": list(range(1, 7)), "l_train": 3, "mse": mse}}
    (tmp_path / "fig1b.csv").write_bytes(_csv_bytes("1b", fig, [0, 1]))
    back = read_figure_csv(str(tmp_path / "fig1b.csv"))["NoPE"]
    for seed, m in zip((0, 1), mse):
        got = np.array([back[seed][length] for length in range(1, 7)])
        assert np.all(np.abs(got - m) <= 5e-6 * np.abs(m)), (seed, got, m)


def test_a_quick_theory_curve_still_trains_its_150_steps():
    for steps in (2, 30, 100):
        for _, c in figure_curves("theory", RunConfig(max_steps=steps)):
            assert c.model == "linear" and c.max_steps == max(6 * steps, 150)


def test_summary_misalignment_is_the_mean_over_the_seeds(tmp_path, monkeypatch):
    from dataclasses import asdict

    import torchtune_longshort.synthetic.experiments as ex
    from torchtune_longshort.synthetic.run_cache import key

    def fake_run_all(configs, workers, cache_dir=None):  # each seed's run: misalignment = its seed, MSE 1 .. 4
        return {key(c): {"config": asdict(c), "steps": 1, "seconds": 0.0, "best_val_mse": 0.1,
                         "test_mse": [1.0, 2.0, 3.0, 4.0],
                         "misalignment": {str(L): {"m": float(c.seed), "n": 10.0 * c.seed} for L in (2, 4)}}
                for c in configs}

    monkeypatch.setattr(ex, "run_all", fake_run_all)
    seeds = (0, 1, 5)
    summary = ex.run_figures(["1b"], str(tmp_path / "out"), RunConfig(l_train=2, l_test=4, max_steps=1), seeds=seeds)
    for label, entry in summary["scalar_misalignment"].items():
        assert entry == {str(L): {"m": np.mean(seeds), "n": 10.0 * np.mean(seeds)} for L in (2, 4)}, label


def test_each_run_measures_misalignment_at_l_train_and_l_test_where_it_is_defined(monkeypatch):
    import torchtune_longshort.synthetic.experiments as ex
    from torchtune_longshort.synthetic.misalignment import scalar_misalignment
    from torchtune_longshort.synthetic.models import LinearAttentionModel

    torch_model = LinearAttentionModel()
    monkeypatch.setattr(ex, "train_run", lambda cfg: {"config": {}, "model": torch_model})
    monkeypatch.setattr(ex.torch, "set_num_threads", lambda n: None)  # _worker's, for its own process
    for l_train, l_test in ((1, 3), (2, 3), (2, 2)):
        cfg = RunConfig(l_train=l_train, l_test=l_test)
        defined = set()
        for L in (l_train, l_test):  # L=1 has one suffix length only: scalar_misalignment refuses it
            try:
                scalar_misalignment(torch_model, cfg.task, L, cfg.outrep, n_seq=2)
                defined.add(str(L))
            except ValueError:
                pass
        assert set(ex._worker(cfg)["misalignment"]) == defined, (l_train, l_test)
