"""Status: the view (``view``), its cheap census of the store (``census``, ``census_file``),
rendering as a table or metrics (``render``) and its HTTP server (``http``)."""
