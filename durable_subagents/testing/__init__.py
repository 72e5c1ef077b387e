"""Test helpers: local servers that speak the OpenAI and Anthropic wire protocols.

Point the real SDKs (or a worker, via ``OPENAI_BASE_URL``/``ANTHROPIC_BASE_URL``) at
them to test model turns offline, including streaming, HTTP errors with
``Retry-After``, slow and hanging streams, and client disconnects.
"""

from .fake_anthropic import FakeAnthropicServer
from .fake_openai import FakeModelServer, FakeOpenAIServer, FakeReply

__all__ = ["FakeAnthropicServer", "FakeModelServer", "FakeOpenAIServer", "FakeReply"]
