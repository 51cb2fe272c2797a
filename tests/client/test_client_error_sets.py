"""The clients' own sets of error codes against the error table: each is a deliberate choice
(what Kafka's clients do with those codes), never a second copy of the table's retriable flag."""
from __future__ import annotations

from kproto.client import cluster, consumer, transactions
from kproto.error_codes import RETRIABLE, ErrorCode, is_retriable


def test_metadata_refresh_errors_are_retriable_leadership_errors():
    assert cluster.METADATA_REFRESH_ERRORS < RETRIABLE
    assert ErrorCode.REQUEST_TIMED_OUT not in cluster.METADATA_REFRESH_ERRORS  # retriable, but no news of leaders


def test_coordinator_answers():
    assert cluster._COORDINATOR_MOVED < RETRIABLE and transactions._COORDINATOR_MOVED < RETRIABLE
    assert transactions._COORDINATOR_MOVED < cluster._COORDINATOR_MOVED


def test_transactional_choices():
    # fatal codes are never retriable ones; the retried ones include one Kafka does not flag
    assert not transactions._FATAL & RETRIABLE
    assert not is_retriable(ErrorCode.OPERATION_NOT_ATTEMPTED) and ErrorCode.OPERATION_NOT_ATTEMPTED in transactions._RETRY
    assert transactions._RETRY - {ErrorCode.OPERATION_NOT_ATTEMPTED} < RETRIABLE


def test_rejoin_errors_are_not_retriable():
    assert not consumer._REJOIN_ERRORS & RETRIABLE
