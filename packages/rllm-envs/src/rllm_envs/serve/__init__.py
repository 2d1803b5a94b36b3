"""Any registered env served with the OpenEnv protocol: ``rllm-envs serve ID``.

:mod:`.protocol` turns Gymnasium results into OpenEnv's JSON and back, :mod:`.sessions` holds
one env per client session, :mod:`.app` holds the routes and :mod:`.cli` the command.
"""
