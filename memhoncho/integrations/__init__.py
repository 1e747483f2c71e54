"""memhoncho inside agent frameworks: one module per framework, each an optional extra.

``memhoncho.integrations.pydantic_ai`` (``pip install 'memhoncho[pydantic-ai]'``),
``memhoncho.integrations.openai_agents`` (``[openai-agents]``) and
``memhoncho.integrations.langgraph`` (``[langgraph]``). This package imports none of them, so
``import memhoncho.integrations`` loads no framework; ``bridge`` is what the three share.
"""
