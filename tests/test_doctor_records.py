"""The doctor's typed records: their JSON form, and the accessors doctor and tune share."""

from __future__ import annotations

import json

from doctor_obs import model, observations, optimizer, probe, site
from pitstop.doctor.analysis.observations import Observations
from pitstop.doctor.analysis.probe_records import ProbeResult, Speedup
from pitstop.doctor.analysis.records import ModelRecord, OddSize
from pitstop.jsoncodec import from_json, to_json
from pitstop.tune.context import context_from_observations


def _precision_probe_skip(obs: Observations) -> str | None:
    from pitstop import catalog

    catalog.load_all()
    from pitstop.tips.pit301_mixed_precision import PrecisionProbe

    return PrecisionProbe().skip_reason(obs)


def test_observations_round_trip_through_json_keeps_keys_and_types():
    obs = observations(models=[model("Net", odd_sizes=[{"module": "fc", "type": "Linear", "out_features": 10,
                                                        "multiple": 8}])],
                       optimizers=[optimizer()], syncs=[site("item")],
                       probes={"precision": probe("fp32", "bfloat16", 1.3, dtype="bfloat16", single_threaded="busy"),
                               "optimizer": ProbeResult.skip("no optimizer stepped")})
    d = json.loads(json.dumps(obs.to_dict()))
    assert d["models"][0]["class"] == "Net" and "cls" not in d["models"][0]
    assert d["models"][0]["odd_sizes"] == [{"module": "fc", "type": "Linear", "out_features": 10, "multiple": 8}]
    assert d["probes"]["optimizer"] == {"skipped": "no optimizer stepped"}  # nothing else in a skipped result
    assert d["probes"]["precision"]["single_threaded"] == "busy" and d["probes"]["precision"]["dtype"] == "bfloat16"
    assert d["step_time"]["mean"] == 0.1 and d["batch"] == {}  # an unmeasured record is written as {}
    back = Observations.from_dict(d)
    assert back == obs
    assert back.batch is None and isinstance(back.models[0], ModelRecord)
    assert back.models[0].odd_sizes == [OddSize(module="fc", type="Linear", sizes={"out_features": 10})]
    assert back.probes["precision"].extra == {"single_threaded": "busy"}


def test_codec_reads_nested_records_and_writes_renamed_keys():
    p = from_json(ProbeResult, {"speedups": {"x": {"ratio": 2.0, "low": 1.5, "high": 2.5}}, "candidate": "x"})
    assert p.speedups == {"x": Speedup(ratio=2.0, low=1.5, high=2.5)}
    assert p.gain().text() == "2.00x (interval 1.50x-2.50x)"
    assert to_json(p) == {"speedups": {"x": {"ratio": 2.0, "low": 1.5, "high": 2.5}}, "candidate": "x"}


def test_doctor_and_tune_agree_on_already_under_autocast():
    """Autocast in a minority of the training forwards is not "already under autocast":
    the precision probe runs and tune keeps the autocast knob (tune used to call any
    autocast forward "already under autocast", the doctor the majority)."""
    some = observations(models=[model()], forwards={"train": 10, "autocast": {"none": 9, "bfloat16": 1}})
    assert some.autocast_dtype is None
    assert _precision_probe_skip(some) is None
    assert context_from_observations(some).autocast is None
    assert context_from_observations(some.to_dict()).autocast is None  # the survey's JSON reads the same

    most = observations(models=[model()], forwards={"train": 10, "autocast": {"none": 1, "bfloat16": 9}})
    assert most.autocast_dtype == "bfloat16"
    assert _precision_probe_skip(most) == "training already runs under autocast"
    assert context_from_observations(most).autocast == "bfloat16"


def test_shared_accessors():
    from doctor_obs import loader

    obs = observations(models=[model("Big"), model("Small")], loaders=[loader("eval"), loader("train", num_workers=3)],
                       optimizers=[optimizer("SGD")], settings={"cpu_cores": 3})
    assert obs.model.cls == "Big" and obs.optimizer.cls == "SGD"
    assert obs.train_loader.num_workers == 3 and obs.usable_cores == 3
    ctx = context_from_observations(obs)
    assert (ctx.optimizer, ctx.loader_workers) == ("SGD", 3)


def test_probe_and_check_share_the_probe_key():
    from pitstop import catalog

    catalog.load_all()
    from pitstop.tips.pit501_fused_optimizer import OptimizerModeProbe

    assert [OptimizerModeProbe.key(i) for i in range(3)] == ["optimizer", "optimizer1", "optimizer2"]
