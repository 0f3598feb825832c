"""tformer.machine: the processor's class from its feature flags, read from /proc/cpuinfo, and `tformer info --system`."""

import pytest

from tformer import machine
from tformer.cli import main

# The three classes issue 33 measured, and two more, by their /proc/cpuinfo flags (trimmed to what matters).
ZEN3 = "fpu sse2 avx fma avx2 bmi2"
ZEN4 = ZEN3 + " avx512f avx512dq avx512_bf16 avx512_vnni avx512vl"
SAPPHIRE_RAPIDS = ZEN4 + " avx_vnni amx_bf16 amx_tile amx_int8"


@pytest.mark.parametrize(
    "flags, expected",
    [
        (ZEN3, "avx2"),
        (ZEN4, "avx512_bf16"),
        (SAPPHIRE_RAPIDS, "amx"),
        ("fpu sse2 avx fma avx2 avx512f avx512dq", "avx512"),  # Skylake-X: AVX-512, no bf16 instructions
        ("fpu sse2 sse4_2", "basic"),
        ("", "basic"),
    ],
)
def test_machine_class_from_features(flags, expected):
    assert machine.machine_class(flags.split()) == expected


def test_cpuinfo_gives_the_first_processors_name_family_and_flags():
    text = (
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC 9R14\n"
        f"flags\t\t: {ZEN4}\n\nprocessor\t: 1\nmodel name\t: something else\nflags\t\t: fpu\n"
    )
    name, flags = machine._cpuinfo(text)
    assert name == "AMD EPYC 9R14 (family 25, model 17)"
    assert flags == set(ZEN4.split())


def test_describe_keeps_only_the_features_that_matter(monkeypatch):
    monkeypatch.setattr(machine, "_read_cpu", lambda: ("Test CPU", set(SAPPHIRE_RAPIDS.split()) | {"sse2", "xyz"}))
    m = machine.describe()
    assert m.cpu == "Test CPU" and m.machine_class == "amx"
    assert set(m.features) == {
        "avx2",
        "fma",
        "avx512f",
        "avx512_bf16",
        "avx512_vnni",
        "avx_vnni",
        "amx_bf16",
        "amx_int8",
        "amx_tile",
    }
    assert m.cores >= 1 and m.threads >= 1 and m.torch_capability
    assert m.to_dict()["features"] == list(m.features) and "amx" in m.summary()


def test_info_system_prints_the_class_and_each_feature(monkeypatch, capsys):
    monkeypatch.setattr(machine, "_read_cpu", lambda: ("Test CPU", set(ZEN4.split())))
    assert main(["info", "--system"]) == 0
    out = capsys.readouterr().out
    assert "Test CPU" in out and "avx512_bf16" in out.split("machine class")[1].splitlines()[0]
    assert "-amx_bf16" in out  # a feature it lacks is shown as missing


def test_info_without_a_directory_or_system_is_one_line(capsys):
    assert main(["info"]) == 2
    assert (
        capsys.readouterr().err.strip() == "tformer info: error: give a model directory (tformer info DIR) or --system"
    )


def test_every_training_session_logs_the_machine_in_its_first_record(tmp_path, monkeypatch):
    """log.jsonl's first record names the processor (model, class, features) and the device; a resumed run, which
    may run on another machine, names it again in the first record of its own session."""
    import json

    monkeypatch.setattr(machine, "_read_cpu", lambda: ("Test CPU", set(ZEN4.split())))
    data = tmp_path / "speech.txt"
    data.write_text("to be or not to be, that is the question.\n" * 30, encoding="utf-8")
    out = tmp_path / "run"
    argv = ["train", "lm", "--data", str(data), "--out", str(out), "--preset", "tiny", "--max-len", "16"]
    argv += ["--batch-size", "4", "--eval-blocks", "4", "--log-every", "1", "--no-progress"]
    assert main([*argv, "--max-steps", "2"]) == 0
    records = [json.loads(line) for line in (out / "log.jsonl").read_text(encoding="utf-8").splitlines()]
    first = records[0]["machine"]
    assert first["cpu"] == "Test CPU" and first["machine_class"] == "avx512_bf16" and first["device"] == "cpu"
    assert "avx512_vnni" in first["features"] and first["torch_capability"] and records[0]["step"] == 1
    assert all("machine" not in r for r in records[1:])
    assert main([*argv, "--max-steps", "3", "--resume"]) == 0
    records = [json.loads(line) for line in (out / "log.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["step"] for r in records if "machine" in r] == [1, 3]  # each session's first record
