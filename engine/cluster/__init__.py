"""The distributed store (Wukong's partitioned graph across processes and hosts).

* :mod:`engine.cluster.wire` -- the Arrow Flight calls and their Arrow IPC tables;
* :mod:`engine.cluster.worker` -- a worker: its partitions, their versions, the Flight service;
* :mod:`engine.cluster.remote` -- the serving process's side of one worker (client, remote shard);
* :mod:`engine.cluster.transport` -- how the serving process reads a worker's partition
  (shared memory, Flight, RDMA), behind one interface;
* :mod:`engine.cluster.coordinator` -- the cluster store: two-phase commits, vector
  timestamps, worker supervision and recovery;
* :mod:`engine.cluster.forkjoin` -- per exploration step, in-place or fork-join.
"""
