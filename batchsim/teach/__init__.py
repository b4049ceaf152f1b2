"""Teaching: the named scenarios, the lessons behind the notebooks, their widgets and figures."""
