"""Real PyTorch workloads that iotrace's diagnosis is tested and demonstrated on.

- `tracer.workloads.train`: a training loop (`python -m tracer.workloads.train --data DIR ...`) with a
  file-per-sample `Dataset`, a real `torch.utils.data.DataLoader`, optional CPU-heavy transform or
  compute, synchronous checkpoints (`torch.save` + `fsync`), and a ready-fd/SIGUSR1 handshake so a
  tracer can attach before training starts.
- `tracer.workloads.dataset`: make a dataset of sample files, make it cold (posix_fadvise DONTNEED)
  or warm, and throttle a process's disk through a blkio (cgroup v1) or io.max (cgroup v2) cgroup.
- `tracer.workloads.scenarios`: one named scenario per finding (`sync_loading`,
  `dataloader_io_bound`, `dataloader_cpu_bound`, `not_io_bound`, `checkpoint_stall`, `cold_cache`,
  `small_files`, `device_saturated`): `prepare(name, workdir)` builds the data and returns the argv,
  the setup steps and a cleanup; `scripts/scenarios.py` runs them untraced and measures them from
  /proc and /proc/diskstats.

Nothing here is imported by the tracer itself; torch is needed only to run `train`.
"""
