"""baselines.BASELINES, the one list of training arms: `--algo` offers grpo and its names, each arm's flags form
an argparse group of their own in `train.py --help`, with the defaults of the arms' papers (or ours where
docs/baselines.md says so), and an arm added to the list is offered, with its flags, without another edit."""
import re
import types

import pytest

import train
from baselines import BASELINES, codedpo, ppo, stepcoder

GROUPS = {"ppo": {"--vf-coef": 1e-3, "--kl-coef": 0.05, "--kl-target": 1.0, "--gae-lambda": 0.95},
          "stepcoder": {"--cccs-stages": 4},
          "codedpo": {"--dpo-programs": None, "--dpo-tests": 4, "--max-test-tokens": 48, "--dpo-temperature": 1.0,
                      "--dpo-rounds": 10, "--dpo-damping": 0.85, "--dpo-beta": 0.1, "--nll-weight": 1.0}}


def help_sections(argv, capsys) -> dict[str, set[str]]:
    """`train.py --help` cut at its section headings ('options:', 'ppo:', ...): {heading: flags named there}.
    The usage block before the first heading is under 'usage'."""
    with pytest.raises(SystemExit) as e:
        train.get_args([*argv, "--help"])
    assert e.value.code == 0
    sections, name = {"usage": set()}, "usage"
    for line in capsys.readouterr().out.splitlines():
        if re.fullmatch(r"[a-z][\w ]*:", line):
            name = line[:-1]
            sections[name] = set()
        elif line.startswith("  --"):  # an option's own line (its help lines are further in, or start elsewhere)
            sections[name].add(line.split()[0])
    return sections


def test_each_baseline_has_its_own_group_of_flags_with_its_defaults(capsys):
    """Catches: a baseline flag left among the common options, in another arm's group, or a changed default."""
    assert list(BASELINES) == ["ppo", "stepcoder", "codedpo"]
    assert BASELINES == {"ppo": ppo, "stepcoder": stepcoder, "codedpo": codedpo}
    sections = help_sections([], capsys)
    for name, flags in GROUPS.items():
        assert sections[name] == set(flags), name
        assert not sections["options"] & set(flags)
    args = train.get_args(["--algo", "stepcoder"])
    assert {f: getattr(args, f[2:].replace("-", "_")) for g in GROUPS.values() for f in g} == \
        {f: v for g in GROUPS.values() for f, v in g.items()}
    assert stepcoder.setup is ppo.setup and codedpo.setup(None, args) == []  # only PPO adds trained tensors


def test_an_arm_added_to_the_list_is_offered_with_its_flags(capsys, monkeypatch):
    """One more entry in BASELINES (a stand-in module): --algo accepts it, its flag parses and shows in its own
    group, and the single-agent rule holds for it as for every arm but grpo. Catches: a second list of names
    (choices or groups written out in flags.py) that the registry does not reach."""
    def add_flags(parser):
        parser.add_argument_group("fake", "a stand-in arm").add_argument("--fake-rounds", type=int, default=3)

    fake = types.SimpleNamespace(step=None, setup=lambda policy, args: [], add_flags=add_flags)
    monkeypatch.setitem(BASELINES, "fake", fake)
    args = train.get_args(["--algo", "fake", "--fake-rounds", "5"])
    assert (args.algo, args.fake_rounds, args.roles) == ("fake", 5, ["coder"])
    assert help_sections([], capsys)["fake"] == {"--fake-rounds"}
    monkeypatch.delitem(BASELINES, "fake")
    with pytest.raises(SystemExit) as e:
        train.get_args(["--algo", "fake"])
    assert e.value.code == 2
    assert "argument --algo: invalid choice: 'fake'" in capsys.readouterr().err


def test_flags_takes_the_arms_from_its_caller(capsys):
    """infra/flags.py names no arm itself (infra sits below baselines/: importing it would be an arrow back up):
    given no baseline, --algo offers grpo alone and no arm's flag exists."""
    from infra import flags

    assert flags.get_args([], {}).algo == "grpo"
    for argv in (["--vf-coef", "0.1"], ["--algo", "ppo"]):
        with pytest.raises(SystemExit) as e:
            flags.get_args(argv, {})
        assert e.value.code == 2
    err = capsys.readouterr().err
    assert "unknown flag --vf-coef" in err and "argument --algo: invalid choice: 'ppo'" in err
