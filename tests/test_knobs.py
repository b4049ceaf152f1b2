"""One dataclass per policy holds its knobs (batchsim.core.knobs): the defaults make_policy uses,
the flags and their help, PolicyConfig's fields and the checks all come from there (issue 22)."""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import re
from dataclasses import dataclass, fields

import numpy as np
import pytest

from batchsim.cli import main
from batchsim.core import knobs as K
from batchsim.core.config import POLICY_DEFAULTS, PolicyConfig, policy_names
from batchsim.core.errors import ConfigError
from batchsim.core.flags import (
    POLICY_FLAGS,
    add_flags,
    comma_list,
    knob_users,
    policy_flags,
    resolve_arg,
)
from batchsim.core.policies import READS, make_policy


def _help(parser: argparse.ArgumentParser, argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parser.parse_args(argv)
    return re.sub(r"\s+", " ", out.getvalue())  # argparse wraps lines where it likes


def test_the_knobs_are_the_ones_the_policies_have_always_had():
    assert K.POLICY_NAMES == ("taxi", "static", "dynamic", "continuous")
    assert K.DEFAULTS == {
        "max_batch": 8,
        "max_wait": 0.05,
        "max_seqs": 64,
        "max_batched_tokens": 2048,
        "block_size": 16,
        "chunked_prefill": True,
        "scheduler": "batchsim",
    }
    assert READS == {
        "taxi": (),
        "static": ("max_batch",),
        "dynamic": ("max_batch", "max_wait"),
        "continuous": (
            "max_seqs",
            "max_batched_tokens",
            "block_size",
            "chunked_prefill",
            "scheduler",
        ),
    }
    # PolicyConfig's fields, in this order, are what realrun's predict and serve read and write.
    assert [f.name for f in fields(PolicyConfig)] == [
        "name",
        "max_batch",
        "max_wait",
        "max_seqs",
        "max_batched_tokens",
        "block_size",
        "chunked_prefill",
    ]


@pytest.mark.parametrize("name", K.POLICY_NAMES)
def test_each_default_is_what_make_policy_builds_and_policyconfig_holds(name):
    policy, config = make_policy(name), PolicyConfig(name)
    for knob in READS[name]:
        if knob != "scheduler":  # a flavour is a class, not an attribute
            assert (
                getattr(policy, knob)
                == K.DEFAULTS[knob]
                == getattr(config, knob)
                == POLICY_DEFAULTS[knob]
            )
    assert repr(config.build()) == repr(policy)
    assert type(make_policy(name, scheduler="vllm-v1")).__name__ == (
        "VLLMV1" if name == "continuous" else type(policy).__name__
    )


def test_each_flag_shows_the_default_make_policy_uses():
    from batchsim.cli import build_parser

    text = _help(build_parser(), ["run", "--help"])
    for knob in K.FLAG_KNOBS:
        flag = "--" + knob.replace("_", "-")
        default = K.DEFAULTS[knob]
        shown = ("on" if default else "off") if isinstance(default, bool) else str(default)
        assert f"{flag} " in text
        assert f"(default {shown})" in K.knob_help(knob)
        # argparse breaks at "--no-"
        assert K.knob_help(knob).replace(" ", "") in text.replace(" ", ""), knob
    assert "--scheduler" not in {f.flag for f in POLICY_FLAGS}  # batchsim's --scheduler is Dask's


def test_a_bare_command_line_builds_the_default_policies():
    from batchsim.cli.options import add_policy_args, policy_from_args

    p = argparse.ArgumentParser()
    add_policy_args(p)
    args = p.parse_args([])
    for name in K.POLICY_NAMES:
        assert repr(policy_from_args(args, name)) == repr(make_policy(name))
    args = p.parse_args(["--max-batch", "3", "--no-chunked-prefill"])
    assert policy_from_args(args, "static").max_batch == 3
    assert policy_from_args(args, "continuous").chunked_prefill is False


def test_realrun_help_still_says_its_own_defaults():
    from realrun.cli import build_parser

    text = _help(build_parser(), ["run", "--help"])
    # realrun's, not 0.05
    assert "the oldest request may wait before the batch leaves (default 0.1)" in text
    assert "the most requests running at once (default 32)" in text


def test_a_field_added_to_a_knobs_class_is_a_flag_with_its_help_and_default():
    @dataclass(frozen=True)
    class Watermarked(K.ContinuousKnobs):
        watermark: float = K.knob(0.01, "blocks kept free for decodes", check=lambda f, v: None)

    knobs = {**K.KNOBS, "continuous": Watermarked}
    flags = {f.dest: f for f in policy_flags(knobs)}
    assert list(flags) == ["policy", *K.FLAG_KNOBS, "watermark"]
    assert flags["watermark"].flag == "--watermark" and flags["watermark"].type is float
    assert flags["watermark"].help == "continuous: blocks kept free for decodes (default 0.01)"
    assert K.knob_users("watermark", knobs) == ("continuous",)
    parser = argparse.ArgumentParser()
    add_flags(parser, policy_flags(knobs))
    assert parser.parse_args(["--watermark", "0.2"]).watermark == 0.2
    assert "--watermark" not in {f.flag for f in POLICY_FLAGS}  # the package's own set is untouched


def test_a_knob_two_policies_read_has_one_default():
    @dataclass(frozen=True)
    class BigBus(K.StaticKnobs):
        max_batch: int = K.knob(32, "seats")

    with pytest.raises(
        TypeError, match="max_batch defaults to 8, another policy's max_batch to 32"
    ):
        K.knob_defaults({"static": BigBus, "dynamic": K.DynamicKnobs})


@pytest.mark.parametrize(
    "make, field, value",
    [
        (lambda: K.StaticKnobs(max_batch=0), "max_batch", "0"),
        (lambda: K.StaticKnobs(max_batch=1.5), "max_batch", "1.5"),
        (lambda: K.DynamicKnobs(max_wait=-1), "max_wait", "-1"),
        (lambda: K.DynamicKnobs(max_wait=float("nan")), "max_wait", "nan"),
        (lambda: K.ContinuousKnobs(block_size=True), "block_size", "True"),
        (lambda: K.ContinuousKnobs(chunked_prefill="no"), "chunked_prefill", "'no'"),
        (lambda: K.ContinuousKnobs(scheduler="vllm-v0"), "scheduler", "'vllm-v0'"),
        (lambda: make_policy("dynamic", max_wait=1e308), "max_wait", "1e+308"),
        (lambda: make_policy("continuous", max_seqs=0), "max_seqs", "0"),
        (lambda: PolicyConfig("continuous", max_batched_tokens=-3), "max_batched_tokens", "-3"),
        (lambda: PolicyConfig("taxi", max_wait=math.inf), "max_wait", "inf"),
        (lambda: policy_names("taxi,limo"), "policy", "limo"),
    ],
)
def test_bad_values_are_refused_naming_the_field_and_the_value(make, field, value):
    with pytest.raises(ConfigError) as e:
        make()
    assert str(e.value).startswith(field) and value in str(e.value), str(e.value)


def test_good_values_pass_as_any_number_a_caller_holds():
    assert K.StaticKnobs(max_batch=np.int64(4)).max_batch == 4
    assert PolicyConfig("static", max_batch=np.int64(4)).build().max_batch == 4
    # None: the default
    assert PolicyConfig("continuous", chunked_prefill=None).build().chunked_prefill is True
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_sqes'"):
        make_policy("continuous", max_sqes=4)


def test_the_flag_layers_and_comma_lists_are_one_helper_each():
    args = argparse.Namespace(rate=None, seed=3)
    assert resolve_arg(args, "seed", {"seed": 1}, {"seed": 0}) == 3
    assert resolve_arg(args, "rate", {"rate": None}, {"rate": 5.0}) == 5.0
    assert resolve_arg(args, "missing", {}) is None
    assert comma_list(" L4, T4 ", "gpus", ("L4", "T4")) == ["L4", "T4"]
    with pytest.raises(ConfigError, match="gpus must be among L4, T4, got 'B200'"):
        comma_list("L4,B200", "gpus", ("L4", "T4"), among="among")
    with pytest.raises(ConfigError, match="policy names taxi more than once"):
        policy_names("taxi,taxi")
    assert knob_users("max_batch") == ("static", "dynamic") and knob_users("rate") is None


def test_the_vllm_side_asks_make_policy_for_the_flavour():
    from realrun.reference.vllm.commands import sim_policy

    p = sim_policy(PolicyConfig("continuous", max_seqs=12, block_size=8, chunked_prefill=False))
    assert type(p).__name__ == "VLLMV1"
    assert (p.max_seqs, p.max_batched_tokens, p.block_size, p.chunked_prefill) == (
        12,
        2048,
        8,
        False,
    )
    with pytest.raises(ConfigError, match="policy must be continuous, got static"):
        sim_policy(PolicyConfig("static"))


@pytest.mark.parametrize(
    "argv, field, value",
    [
        (["run", "--policy", "static", "--max-batch", "0"], "max_batch", "0"),
        (["run", "--policy", "continuous", "--block-size", "-2"], "block_size", "-2"),
        (["run", "--policy", "dynamic", "--max-wait", "1e9"], "max_wait", "1000000000.0"),
        (
            ["run", "--policy", "continuous", "--max-batched-tokens", "2000000000"],
            "max_batched_tokens",
            "2000000000",
        ),
    ],
)
def test_the_cli_exits_2_with_one_line_on_a_bad_knob(argv, field, value, capsys):
    code = main([*argv, "--requests", "20", "--no-plots"])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and value in lines[0], err
    assert "Traceback" not in err
