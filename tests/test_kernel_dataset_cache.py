"""A data set larger than the page cache its job may use, on real PyTorch jobs: read for two
epochs in a memory cgroup of its size, whose workers' memory leaves at most ~190 MiB of page
cache, the second epoch reads from disk again (`dataset_exceeds_cache`, no `cold_cache`),
traced from its start and attached to once its workers run (one run, two tracers); and one
that fits in a larger cgroup, whose later epochs hit the cache (never `dataset_exceeds_cache`)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import needs_root

torch = pytest.importorskip("torch", reason="the PyTorch scenarios need torch (pip install torch)")
from scenario_trace import Traced, shared, trace  # noqa: E402

from tracer.workloads import dataset as ds  # noqa: E402
from tracer.workloads.scenarios import SPECS, Scenario  # noqa: E402

pytestmark = [needs_root, pytest.mark.kernel]

MIB = 1 << 20
WRONG = {"cold_cache", "not_io_bound", "dataloader_cpu_bound", "sync_loading"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("dataset_cache")


@pytest.fixture(autouse=True)
def no_cgroup_left():
    """The jobs' cgroups are removed, even when a job dies before it removes its own."""
    before = set(ds.throttled_names())
    yield
    for name in set(ds.throttled_names()) - before:
        ds.unthrottle(name)
    assert set(ds.throttled_names()) <= before


def data_reads(t: Traced, sc: Scenario):
    files = t.table("files")
    reads = files[(files.op == "read") & files.path.str.startswith(str(sc.data))]
    # a row's pages missed again at most its bytes read again (readahead may miss beyond them),
    # as the diagnosis counts them
    missed = (reads.reread_pages_missed.fillna(0) * 4096).clip(upper=reads.reread_bytes.fillna(0))
    return int(reads.bytes.sum()), int(reads.reread_bytes.sum()), int(missed.sum())


def the_jobs_cgroup(t: Traced, limit_mib: int) -> str:
    memory = t.table("memory")
    main = int(t.table("processes").query("role == 'main'").pid.iloc[0])
    limited = memory[memory.limit_bytes.notna()]
    assert set(limited.pid) == {main}
    assert set(limited.limit_bytes) == {limit_mib * MIB}
    assert set(limited.source) <= {"cgroup_v1", "cgroup_v2"}
    assert (limited.cache_bytes <= limited.usage_bytes).all()
    assert (memory.available_bytes > 0).all()
    return f"/iotrace-train-{main}"


@pytest.mark.parametrize("mode", ["launch", "attach"])
def test_a_data_set_larger_than_its_memory_cgroup(mode, tmp_path_factory):
    t, sc = shared("dataset_exceeds_cache", "launch" if mode == "launch" else "workers",
                   tmp_path_factory)
    spec = SPECS[sc.name]
    final = t.final_findings()
    table = final[["kind", "severity", "summary"]].to_string()
    assert final.kind.iloc[0] == "dataloader_io_bound", table
    assert "dataset_exceeds_cache" in set(final.kind), table
    assert not set(final.kind) & WRONG, table
    ev = json.loads(final[final.kind == "dataset_exceeds_cache"].evidence.iloc[0])
    assert ev["top_dir"] == str(sc.data)
    assert ev["reread_miss_pct"] >= 50
    assert ev["limit_bytes"] == spec.memory_mib * MIB
    assert ev["cgroup"] == the_jobs_cgroup(t, spec.memory_mib)
    size = spec.n_files * spec.file_kib * 1024
    nbytes, again, missed = data_reads(t, sc)
    assert ev["dirs"][str(sc.data)] == {"bytes": nbytes, "reread_bytes": again,
                                        "reread_missed_bytes": missed}
    assert ev["first_pass_bytes"] == nbytes - again
    if mode == "launch":
        # the second epoch is read again, but for the few files read at the end of the first
        # and at the start of the second in one interval (a pass counted when its reads stop)
        assert nbytes == 2 * size
        assert size - 32 * spec.file_kib * 1024 <= again <= size
        report = subprocess.run([sys.executable, "-m", "tracer.cli", "report", str(t.out)],
                                capture_output=True, text=True, timeout=120)
        assert "] dataset_exceeds_cache: The data set under" in report.stdout  # from the rows
    else:  # files read before iotrace attached are new to it in the second epoch
        assert size // 4 <= again < size
    assert "] dataset_exceeds_cache:" in t.stdout


def test_a_data_set_that_fits_in_its_memory_cgroup(workdir, tmp_path):
    """A quarter of the data in a cgroup that leaves room for it: the first epoch reads from
    disk, the next three from the page cache; an I/O-bound job (its cold first epoch), so the
    rule was judged."""
    t, sc = trace("dataset_fits_cache", "launch", workdir, tmp_path)
    spec = SPECS[sc.name]
    final = t.final_findings()
    table = final[["kind", "severity", "summary"]].to_string()
    assert "dataloader_io_bound" in set(final.kind), table
    assert "dataset_exceeds_cache" not in set(final.kind), table
    assert set(final.kind) <= {"dataloader_io_bound", "cold_cache", "small_files"}, table
    the_jobs_cgroup(t, spec.memory_mib)
    size = spec.n_files * spec.file_kib * 1024
    nbytes, again, missed = data_reads(t, sc)
    assert nbytes == 4 * size
    # Epochs 2-4 take a fraction of a second each: the files read at the end of the first
    # epoch are read again within the same interval, which counts as one pass there.
    assert 2 * size <= again <= 3 * size
    assert missed <= again // 20  # hits
