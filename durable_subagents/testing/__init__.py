"""Test helpers: Temporal's dev server, and local servers that speak the model APIs.

``DevServer`` runs Temporal's dev server (SQLite, search attributes registered) for
the life of a test session or a bench; ``free_port`` picks its ports. The fake model
servers speak OpenAI's Chat Completions and Responses and Anthropic's Messages wire
protocols, and Claude's on Amazon Bedrock (SigV4, AWS event-stream framing) and Google
Vertex AI (a bearer token, ``rawPredict``).

Point the real SDKs (or a worker, via ``OPENAI_BASE_URL``/``ANTHROPIC_BASE_URL``) at
them to test model turns offline, including streaming, HTTP errors with
``Retry-After``, random 5xx (``fail_rate``), broken streams (``add_fault``: reset,
truncated, hanging), slow streams, client disconnects, a context window refused with
each API's own error (``context_window``), each API's prompt caching with its usage
fields, replies made from the request (``responder``), and Anthropic's extended
thinking: signed thinking blocks that must come back unchanged, and OpenAI's
reasoning items, whose encrypted content must come back unchanged. ``workspace_for_tools``
readies a workspace for a root worker's tools.
"""

from durable_subagents.devserver import DevServer, free_port, temporal_binary

from ._workspace import workspace_for_tools
from .fake_anthropic import FakeAnthropicServer
from .fake_bedrock import FakeBedrockServer
from .fake_openai import FAULTS, FakeModelServer, FakeOpenAIServer, FakeReply, Fault
from .fake_openai_responses import FakeOpenAIResponsesServer
from .fake_vertex import FakeVertexServer

__all__ = [
    "FAULTS",
    "DevServer",
    "FakeAnthropicServer",
    "FakeBedrockServer",
    "FakeModelServer",
    "FakeOpenAIResponsesServer",
    "FakeOpenAIServer",
    "FakeReply",
    "FakeVertexServer",
    "Fault",
    "free_port",
    "temporal_binary",
    "workspace_for_tools",
]
