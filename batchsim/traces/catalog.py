"""The public traces batchsim knows: where each is published, and its SHA-256.

A trace is data someone else published; a copy is only the trace if it is the same
bytes. Each entry pins the file's SHA-256, so a fetched copy is kept only when it is
byte for byte the published file (a truncated download, a proxy's error page or a
re-published file with other rows would give other numbers and say nothing).

Only traces that ``batchsim.core.traces.read_trace`` reads are listed: the Azure LLM
inference trace 2023 (code and conversation, one hour each). Azure's 2024 week-long
traces (16.8 and 27.3 million rows, timestamps with a time zone) are neither in that
format nor within the reader's 10-million-row limit, so fetching them would only fill
a disk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..core.errors import ConfigError

__all__ = ["PublicTrace", "PUBLIC_TRACES", "public_trace", "SPLITWISE"]

#: The paper the Azure 2023 traces accompany; CC-BY-4.0 asks every copy and every use to cite it.
SPLITWISE = (
    "Pratyush Patel, Esha Choukse, Chaojie Zhang, Aashaka Shah, Íñigo Goiri, Saeed Maleki, Ricardo "
    'Bianchini. "Splitwise: Efficient generative LLM inference using phase splitting", ISCA 2024.'
)
_AZURE = "https://raw.githubusercontent.com/Azure/AzurePublicDataset/master/data/"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")


@dataclass(frozen=True)
class PublicTrace:
    """One published trace: the name ``fetch`` knows it by, the file it is kept as, and its
    checksum."""

    name: str
    file: str  # the file name in the cache (and in the package, for the one that ships)
    # where the publisher keeps it; its last part is the file name a mirror (--from) must use
    url: str
    sha256: str
    size: int  # bytes: a download is cut off past this, whatever the server sends
    rows: int
    about: str
    citation: str = SPLITWISE
    license: str = "CC-BY-4.0"

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ConfigError(
                f"name must be lower-case letters, digits and dashes, got {self.name!r}"
            )
        if "/" in self.file or not self.file.endswith(".csv"):
            raise ConfigError(f"file must be a bare .csv file name, got {self.file!r}")
        if not self.url.startswith("https://"):
            raise ConfigError(f"url must be https://, got {self.url!r}")
        if not _SHA256.fullmatch(self.sha256):
            raise ConfigError(f"sha256 must be 64 lower-case hex digits, got {self.sha256!r}")
        for field in ("size", "rows"):
            if not isinstance(getattr(self, field), int) or getattr(self, field) < 1:
                raise ConfigError(
                    f"{field} must be a whole number >= 1, got {getattr(self, field)!r}"
                )

    @property
    def upstream_file(self) -> str:
        """The publisher's file name: what a mirror folder given with ``--from`` holds."""
        return self.url.rsplit("/", 1)[1]


PUBLIC_TRACES: tuple[PublicTrace, ...] = (
    PublicTrace(
        "azure-2023-conv",
        "azure_llm_2023_conv.csv",
        _AZURE + "AzureLLMInferenceTrace_conv.csv",
        "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8",
        719_188,
        19_366,
        "Azure LLM inference trace 2023, conversation: 19,366 requests over 58 minutes",
    ),
    PublicTrace(
        "azure-2023-code",
        "azure_llm_2023_code.csv",
        _AZURE + "AzureLLMInferenceTrace_code.csv",
        "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6",
        320_117,
        8_819,
        "Azure LLM inference trace 2023, code: 8,819 requests over 57 minutes, prompts of 2,048 "
        "tokens on average, answers of 28",
    ),
)


def public_trace(name: str) -> PublicTrace:
    """The catalog entry called ``name`` (or whose file is ``name``)."""
    for t in PUBLIC_TRACES:
        if name in (t.name, t.file):
            return t
    raise ConfigError(
        f"trace must be one of {', '.join(t.name for t in PUBLIC_TRACES)}, got {name!r}"
    )
