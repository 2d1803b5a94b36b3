"""Chat templates, token-in/token-out rendering and tool-call parsing."""

from rllm_agents.chat.tito import (
    Segment,
    TokenConversation,
    emitted_glue_length,
    encode,
    render_prompt_ids,
    render_text,
    template_rewrites_history,
    text_after_assistant_turn,
)
from rllm_agents.chat.tool_calls import (
    ToolCall,
    parse_openai_tool_calls,
    parse_tool_calls,
    tool_calls_to_text,
)

__all__ = [
    "Segment",
    "TokenConversation",
    "ToolCall",
    "emitted_glue_length",
    "encode",
    "parse_openai_tool_calls",
    "parse_tool_calls",
    "render_prompt_ids",
    "render_text",
    "template_rewrites_history",
    "text_after_assistant_turn",
    "tool_calls_to_text",
]
