"""``realrun load`` for a room (issue 37): chat prompts sized as the server counts them, and output
paths refused with the flag and the real reason.

The chat test runs against a real ``realrun serve`` (offline tiny-gpt2 on 127.0.0.1): the server's
own ``usage.prompt_tokens`` must equal ``--prompt-len``, where the words it sent before came to
367-375 tokens of the byte tokenizer for a ``--prompt-len`` of 100.
"""

from __future__ import annotations

import pytest

from realrun.classroom.load.chatsize import chat_sizer
from realrun.classroom.serve.protocol import chat_text
from realrun.engine.model import ByteTokenizer


@pytest.mark.parametrize("n", [18, 19, 100, 517])
def test_a_sized_chat_is_n_tokens_after_the_template(n):
    size = chat_sizer("tiny-gpt2")
    text = size(" ".join(["the", "of", "and", "to"] * n), n)
    assert len(ByteTokenizer().encode(chat_text([{"role": "user", "content": text}]))) == n


def test_a_model_whose_tokenizer_is_not_at_hand_is_sent_as_before():
    assert chat_sizer("no-such-org/no-such-model-xyz") is None


def test_chat_load_sends_exactly_prompt_len_tokens_to_our_server(tmp_path):
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    pytest.importorskip("httpx")
    from serving import served

    from batchsim import Poisson, Uniform, make_workload
    from realrun.classroom.load import LoadConfig, run_load

    wl = make_workload(Poisson(50.0), Uniform(100, 100), Uniform(3, 3), n=6, seed=0)
    with served(tmp=tmp_path) as srv:
        report = run_load(LoadConfig(url=srv.url, endpoint="/v1/chat/completions"), wl)
    assert all(r.success for r in report.results), [r.error for r in report.results]
    assert [r.prompt_len for r in report.results] == [100] * 6  # the server's own count (usage)


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["serve", "--record", "/proc/x.csv"], "--record"),
        (["load", "--json", "/proc/x.json"], "--json"),
    ],
)
def test_an_output_in_a_system_folder_names_the_flag_and_why(argv, flag, capsys):
    from realrun import cli

    assert cli.main(argv) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert (
        len(lines) == 1 and flag in lines[0] and "/proc" in lines[0] and "system folder" in lines[0]
    ), lines
