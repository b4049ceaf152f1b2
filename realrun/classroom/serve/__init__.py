"""``realrun serve``: the class is the traffic.

An OpenAI-compatible HTTP server (Starlette on uvicorn) around our engine, one batching
policy and the one driver on the wall clock, with arrivals coming from the network
(``batchsim.core.live``) instead of a workload file. See ``app`` for the routes, ``live`` for
the engine thread, ``record`` for the trace it leaves.
"""

from .app import AppConfig, make_app
from .live import LiveServer, Stream
from .metrics import Histogram, prometheus_text
from .protocol import Completion, RequestError, parse_completion
from .record import RECORD_FIELDS, write_record
from .server import serve

__all__ = [
    "serve",
    "make_app",
    "AppConfig",
    "LiveServer",
    "Stream",
    "Histogram",
    "prometheus_text",
    "Completion",
    "RequestError",
    "parse_completion",
    "RECORD_FIELDS",
    "write_record",
]
