"""Status: the view (``view``), its health verdict (``health``),
rendering as a table or metrics (``render``) and its HTTP server (``http``)."""
