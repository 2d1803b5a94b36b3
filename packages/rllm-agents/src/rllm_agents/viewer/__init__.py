"""``rllm-view``: a local web page to browse a run's episodes (see :mod:`.cli`).

:mod:`.runs` reads a run folder into plain data (pure functions: the list, its filters, one
episode's turns and trained tokens); :mod:`.server` serves that and one static page
(``static/index.html``, plain HTML and JavaScript, no build step) from the standard library.
"""
