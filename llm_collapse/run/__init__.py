"""A comparison run: configuration, checks, inputs, the loop over models x methods x tasks, and its files.

- `config`: `CompareConfig` (command line > YAML > defaults: the run's fields and each selected task's options)
  and its value checks; `arguments`: its flags (the tasks' from their options).
- `preflight`: what the values point at (folders, paths, packages, corpus), before any model loads.
- The texts every model sees are the tasks' (`llm_collapse.tasks.inputs.build_inputs`), built once under the
  first model's tokenizer.
- `models`: loading a model as a run needs it.
- `runner`: the loop; `distributed`: each rank embeds its share into the cache first.
- `directory`: the output folder and its run marker; the files it writes are `llm_collapse.records`'.
- `replay`: what ``report --recompute`` runs on (the vectors a run saved: `llm_collapse.records.saved_embeddings`).
- `plan` (``--dry-run``); the GPU estimate is `llm_collapse.cost.estimate`, and a config's declared claims
  are read by `llm_collapse.records.claims`.
"""
