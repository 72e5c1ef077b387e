"""Model providers behind one interface: OpenAI, Anthropic and an offline script.

OpenAI is spoken two ways: Chat Completions (``openai:``, any compatible server) and
the Responses API (``openai-responses:``); Claude three: Anthropic's API
(``anthropic:``), Amazon Bedrock (``bedrock:``) and Google Vertex AI (``vertex:``).

``resolve_provider("openai:gpt-4.1-mini")`` gives the provider, the full name and the
provider's model name; ``await provider.complete(ModelRequest(...))`` runs one turn.
"""

from ._base import (
    PROVIDERS,
    ModelProvider,
    TextSink,
    clear_provider_cache,
    close_providers,
    import_sdk,
    parse_model,
    resolve_provider,
)
from ._errors import model_unavailable
from .anthropic import AnthropicProvider
from .bedrock import BedrockProvider
from .openai import OpenAIProvider
from .openai_responses import OpenAIResponsesProvider
from .scripted import SCRIPTS, Script, ScriptedProvider, ScriptTurn, load_script
from .vertex import VertexProvider

__all__ = [
    "PROVIDERS",
    "SCRIPTS",
    "AnthropicProvider",
    "BedrockProvider",
    "ModelProvider",
    "OpenAIProvider",
    "OpenAIResponsesProvider",
    "Script",
    "ScriptTurn",
    "ScriptedProvider",
    "TextSink",
    "VertexProvider",
    "clear_provider_cache",
    "close_providers",
    "import_sdk",
    "load_script",
    "model_unavailable",
    "parse_model",
    "resolve_provider",
]
