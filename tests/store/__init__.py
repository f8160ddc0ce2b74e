"""The run store: ids, the index, records (and hostile ones), models, doctor, cancel requests,
reading a run's events; ``workspace/`` for stores that members share."""
