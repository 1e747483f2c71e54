"""The ways in from other software: one module per agent framework, and the MCP server.

Each loads its framework (an optional extra) only when used: ``import memhoncho`` loads none.
``pydantic_ai`` (``pip install 'memhoncho[pydantic-ai]'``), ``openai_agents``
(``[openai-agents]``) and ``langgraph`` (``[langgraph]``) share ``bridge``; ``mcp`` is
``memhoncho mcp``.
"""
