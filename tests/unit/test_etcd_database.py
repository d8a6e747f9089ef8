"""etcd's database size and quota, read from its /metrics (printed by `make test` each minute)."""

from __future__ import annotations

from localcluster.controlplane import etcd_database

# As etcd 3.6 prints them (the quota in the exponent form Prometheus' Go client uses for large values).
METRICS = """\
# HELP etcd_mvcc_db_total_size_in_bytes Total size of the underlying database physically allocated in bytes.
# TYPE etcd_mvcc_db_total_size_in_bytes gauge
etcd_mvcc_db_total_size_in_bytes 7.27744512e+08
# HELP etcd_mvcc_db_total_size_in_use_in_bytes Total size of the underlying database logically in use in bytes.
# TYPE etcd_mvcc_db_total_size_in_use_in_bytes gauge
etcd_mvcc_db_total_size_in_use_in_bytes 6.88783360e+08
# HELP etcd_server_quota_backend_bytes Current backend storage quota size in bytes.
# TYPE etcd_server_quota_backend_bytes gauge
etcd_server_quota_backend_bytes 2.147483648e+09
"""


def test_the_allocated_size_and_the_quota_are_read_not_the_size_in_use() -> None:
    assert etcd_database(METRICS) == (727_744_512, 2**31)


def test_metrics_without_either_figure_give_nothing() -> None:
    assert etcd_database(METRICS.replace("etcd_server_quota_backend_bytes 2", "x 2")) is None
    assert etcd_database("") is None
