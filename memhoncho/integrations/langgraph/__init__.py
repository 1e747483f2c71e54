"""memhoncho in LangGraph (with langchain-core): ``pip install 'memhoncho[langgraph]'``.
``HonchoMemory`` is the whole surface (``memory``); ``streaming`` maps the modes of
``graph.stream`` so a streamed run is captured as an invoked one is."""

from memhoncho.integrations.langgraph.memory import HonchoMemory

__all__ = ["HonchoMemory"]
