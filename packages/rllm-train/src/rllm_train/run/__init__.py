"""The shared layer under both backends: what a run is, worked out once from its config.

``native/`` and ``verl/`` each train; everything they must agree on lives here, so that the
same config means the same run on either:

* :mod:`~rllm_train.run.algorithm` - the algorithms, one table (what each is made of, where it
  runs), read instead of comparing names;
* :mod:`~rllm_train.run.specs` - the env and the agent (class, arguments, system prompt) as
  plain specs that verl's workers rebuild from a data row;
* :mod:`~rllm_train.run.tasks` and :mod:`~rllm_train.run.curriculum` - which tasks each step
  and each validation plays, with which env seeds;
* :mod:`~rllm_train.run.refusals` - what each backend cannot honour, with the reason;
* :mod:`~rllm_train.run.failures` - when a step's failed episodes stop the run;
* :mod:`~rllm_train.run.reporting` - what a run writes (metrics, curve, summary);
* :mod:`~rllm_train.run.backends` - the backends themselves, as a table of entry points;
* :mod:`~rllm_train.run.setup` - :class:`RunSetup`, all of the above for one config.

Nothing here imports ``native/`` or ``verl/``; both import from here.
"""
