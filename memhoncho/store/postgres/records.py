"""The PostgreSQL store's outbox: records appended in one transaction, read, compacted.

The transactional-outbox pattern: a capture is one short transaction (the conversation's row
is locked and its ``last_seq`` bumped, the record inserted) committed with
``synchronous_commit=on`` before ``capture`` returns, so two hosts capturing turns of one
conversation get seqs in the order their captures committed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from pydantic import ValidationError

from memhoncho.errors import CaptureTooLarge, OutboxCapacity
from memhoncho.models import Ledger
from memhoncho.store import hint_marks
from memhoncho.store.base import Appended, Record, Seen, SweepListing
from memhoncho.store.outbox import run_conflict
from memhoncho.store.postgres.connection import PgConnections, distinct_keys, float_or_none

if TYPE_CHECKING:
    import psycopg


#: The server's clock, one value a statement: marks claimed from every machine age by one clock.
_NOW = "extract(epoch FROM statement_timestamp())"
#: The usual capture as one statement, in autocommit (one round trip, one transaction),
#: prepared on each pooled connection: when the conversation's row exists, the run is in
#: neither the ledger's window nor the outbox and the outbox has room by the seq clock, it locks
#: the row, bumps the clock (``last_seq``: captures of one conversation commit in seq order),
#: inserts the record and claims the hint mark (``hint_at``) for a caller that publishes, or
#: leaves the outbox relay a request for one that cannot, when no hint waits. It answers
#: (seq, hint), or nothing: then ``APPEND_CAREFUL_SQL`` decides. A concurrent capture of the
#: same run fails its INSERT on the unique batch id, which undoes the statement whole.
APPEND_SQL = f"""WITH c AS (
 UPDATE memhoncho_conversations c SET last_seq = c.last_seq + 1,
  pending_batches = c.pending_batches + 1,
  pending_messages = c.pending_messages + %(messages)s,
  hint_at = CASE WHEN %(hint)s = 'publish'
   AND (c.hint_at IS NULL OR c.hint_at < {_NOW} - %(stale_s)s) THEN {_NOW} ELSE c.hint_at END
 WHERE c.key = %(key)s AND c.conversation_id IS NOT NULL
  AND NOT coalesce(c.ledger -> 'delivered_batches' ? %(batch_id)s, false)
  AND c.last_seq + 1 - c.delivered_seq <= %(max_pending)s
  AND NOT EXISTS (SELECT FROM memhoncho_outbox o
   WHERE o.key = %(key)s AND o.batch_id = %(batch_id)s)
 RETURNING c.last_seq, c.hint_at),
o AS (INSERT INTO memhoncho_outbox (key, seq, batch_id, captured_at, messages, record)
 SELECT %(key)s, c.last_seq, %(batch_id)s, %(captured_at)s, %(messages)s, %(record)s::jsonb
 FROM c),
r AS (INSERT INTO memhoncho_relay_requests (key, conversation_id, requested_at)
 SELECT %(key)s, %(conversation_id)s, {_NOW} FROM c
 WHERE %(hint)s = 'request' AND (c.hint_at IS NULL OR c.hint_at < {_NOW} - %(stale_s)s)
 ON CONFLICT (key) DO NOTHING)
SELECT c.last_seq, CASE WHEN %(hint)s = 'publish' THEN c.hint_at = {_NOW}
 ELSE c.hint_at IS NULL OR c.hint_at < {_NOW} - %(stale_s)s END
FROM c"""
#: Whatever the usual statement leaves (a conversation's first capture, a duplicate, an outbox
#: that may be full) as one server-side function (migration 0006) under the row lock: it also
#: refuses the duplicate and the full outbox, answering what the capture is.
APPEND_CAREFUL_SQL = (
    "SELECT status, seq, known_digest, pending, hint FROM memhoncho_append("
    "%(key)s, %(conversation_id)s, %(batch_id)s, %(captured_at)s, %(messages)s,"
    " %(record)s::jsonb, %(max_pending)s, %(stale_s)s, %(hint)s)"
)
#: what an outbox line (``outbox.encode_line``) adds to the record's JSON: checksum, space,
#: ``,"seq":`` and a seq of 16 digits (microseconds since the epoch), newline
LINE_OVERHEAD = 9 + len(',"seq":') + 16 + 1
PENDING_EDGE_SQL = "SELECT seq, record FROM memhoncho_outbox WHERE key = %s ORDER BY seq {} LIMIT 1"


def _third(row: tuple[Any, ...]) -> Any:
    return row[2]


def _record(seq: int, record: dict[str, Any]) -> Record:
    return cast(Record, {**record, "seq": seq})  # jsonb as the capture stored it


class PgRecords(PgConnections):
    """The outbox rows and the per-conversation capture clock."""

    def append(
        self,
        key: str,
        record: Record,
        *,
        max_pending: int,
        max_bytes: int | None = None,
        after_write: Callable[[], object] | None = None,
    ) -> Appended:
        body = {k: v for k, v in record.items() if k != "seq"}
        payload = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
        if max_bytes is not None:  # the same ceiling as an outbox line of the file store
            size = len(payload.encode("utf-8")) + LINE_OVERHEAD
            if size > max_bytes:
                raise CaptureTooLarge(
                    f"the run is {size} bytes; the limit is {max_bytes} bytes", limit=max_bytes
                )
        batch_id = str(record["batch_id"])
        params = {
            "key": key,
            "conversation_id": record.get("conversation_id"),
            "batch_id": batch_id,
            "captured_at": float_or_none(record.get("captured_at")),
            "messages": len(record.get("messages") or []),
            "record": payload,
            "max_pending": max_pending,
            "stale_s": hint_marks.STALE_S,
            # A caller that publishes claims the mark; one that cannot (``memhoncho capture``,
            # no API key yet, a broker known down) leaves the outbox relay a request.
            "hint": "publish" if after_write is not None else "request",
        }
        with self.connection() as conn:
            row = _usual_append(conn, params)
            if row is None:
                row = conn.execute(APPEND_CAREFUL_SQL, params, prepare=True).fetchone()
        assert row is not None
        status, seq, known_digest, pending, hint = row
        if status == "duplicate":  # delivered within the ledger's window, or in the outbox
            conflict = run_conflict(known_digest, record)
            if conflict is not None:
                raise conflict
            return Appended(duplicate=True)
        if status == "full":
            raise OutboxCapacity(
                f"the conversation has {pending} undelivered batches; the limit is {max_pending}",
                limit=max_pending,
            )
        if after_write is None:
            return Appended(duplicate=False, seq=int(seq), relayed=bool(hint))
        if hint:
            # Committed already: a worker woken by this hint sees the record. Only the capture
            # that claimed the mark publishes; the others are seen by the hint that waits.
            try:
                after_write()
            except Exception:  # a hint is never worth failing a durable capture for
                pass
        return Appended(duplicate=False, seq=int(seq))

    # ---- the hint marks (``store/hint_marks.py``, kept where every machine sees them) ----------

    def take_hint(self, key: str) -> None:
        """A delivery starts: captures from now on publish a hint of their own. Waits on a
        committing capture's row lock, so the outbox read after it sees that capture."""
        with self._writer(key) as conn:
            conn.execute(
                "UPDATE memhoncho_conversations SET hint_at = NULL"
                " WHERE key = %s AND hint_at IS NOT NULL",
                (key,),
            )

    def claim_hint(self, key: str, *, due_in_s: float = 0.0) -> bool:
        """``hint_marks.claim`` on the database's mark: True when no hint waits (or the one
        waiting is older than ``STALE_S``) and a record is pending, and the caller, having set
        it, must publish. Nothing pending, no hint: a relay request whose records a watchdog's
        or a retry's hint delivered meanwhile would otherwise publish one that finds nothing
        and holds the mark, so the next capture coalesces on a hint no worker may take soon."""
        with self.connection() as conn:
            row = conn.execute(
                "UPDATE memhoncho_conversations"
                " SET hint_at = extract(epoch FROM clock_timestamp()) + %s"
                " WHERE key = %s AND last_seq > delivered_seq AND (hint_at IS NULL"
                " OR hint_at < extract(epoch FROM clock_timestamp()) - %s) RETURNING key",
                (max(0.0, due_in_s), key, hint_marks.STALE_S),
            ).fetchone()
        return row is not None

    def renew_hint(self, key: str) -> None:
        """``hint_marks.renew`` on the database's mark: a waiting hint's age counts from now
        (a mark dated later keeps its date); no mark (its delivery took it) stays none."""
        with self.connection() as conn:
            conn.execute(
                "UPDATE memhoncho_conversations"
                " SET hint_at = greatest(hint_at, extract(epoch FROM clock_timestamp()))"
                " WHERE key = %s AND hint_at IS NOT NULL",
                (key,),
            )

    def release_hint(self, key: str, conversation_id: str | None = None) -> None:
        """The publish failed: no hint waits, so the next capture publishes; with
        ``conversation_id``, the outbox relay is also asked to (it tries at every look)."""
        with self.connection() as conn:
            conn.execute("UPDATE memhoncho_conversations SET hint_at = NULL WHERE key = %s", (key,))
            if conversation_id is not None:
                self._request(conn, [(key, conversation_id)])

    def request_relay(self, requests: list[tuple[str, str]]) -> None:
        """Ask the outbox relay to publish these (key, conversation id) hints."""
        if requests:
            with self.connection() as conn:
                self._request(conn, requests)

    @staticmethod
    def _request(conn: psycopg.Connection[Any], requests: list[tuple[str, str]]) -> None:
        conn.execute(
            "INSERT INTO memhoncho_relay_requests (key, conversation_id, requested_at)"
            " SELECT k, c, extract(epoch FROM clock_timestamp())"
            " FROM unnest(%s::text[], %s::text[]) AS r(k, c) ON CONFLICT (key) DO NOTHING",
            ([k for k, _ in requests], [c for _, c in requests]),
        )

    def take_relay_requests(self) -> list[tuple[str, str]]:
        """Remove and return every relay request (key, conversation id), oldest first.

        Removed before the hint is published (``hint_marks.take_request``'s order), so a
        capture that asks meanwhile makes a new request; another relay takes none of these."""
        with self.connection() as conn:
            rows = conn.execute(
                "DELETE FROM memhoncho_relay_requests RETURNING key, conversation_id, requested_at"
            ).fetchall()
        return [(key, conversation_id) for key, conversation_id, _ in sorted(rows, key=_third)]

    def hint_mark_at(self, key: str) -> float | None:
        with self.connection() as conn:
            row = conn.execute(
                "SELECT hint_at FROM memhoncho_conversations WHERE key = %s", (key,)
            ).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def hint_marks(self) -> dict[str, float]:
        """Every waiting mark and when it was claimed (server clock, epoch seconds)."""
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT key, hint_at FROM memhoncho_conversations WHERE hint_at IS NOT NULL"
            ).fetchall()
        return {key: float(at) for key, at in rows}

    def records(self, key: str) -> list[Record]:
        return self.pending(key, -(2**62))

    def pending(self, key: str, after_seq: int) -> list[Record]:
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT seq, record FROM memhoncho_outbox WHERE key = %s AND seq > %s ORDER BY seq",
                (key, after_seq),
            ).fetchall()
        return [_record(seq, record) for seq, record in rows]

    def edges(self, key: str) -> tuple[Record | None, Record | None]:
        with self.connection() as conn:
            first = conn.execute(PENDING_EDGE_SQL.format("ASC"), (key,)).fetchone()
            if first is None:
                return None, None
            last = conn.execute(PENDING_EDGE_SQL.format("DESC"), (key,)).fetchone()
        assert last is not None
        return _record(*first), _record(*last)

    def newest_record(self, key: str) -> Record | None:
        with self.connection() as conn:
            last = conn.execute(PENDING_EDGE_SQL.format("DESC"), (key,)).fetchone()
        return None if last is None else _record(*last)

    def newest_seq(self, key: str) -> int:
        """The conversation's capture clock, once any capture still committing is done.

        ``FOR SHARE`` waits on the row a committing capture holds. A conversation's first
        capture creates that row, which no other transaction sees yet: then an insert of the
        same key waits for it (a unique-key conflict in progress), and the row is read again.
        (With no capture at all, that leaves an empty row behind: the clock at 0, harmless.)
        """
        sql = "SELECT last_seq FROM memhoncho_conversations WHERE key = %s FOR SHARE"
        with self.connection() as conn:
            row = conn.execute(sql, (key,)).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO memhoncho_conversations (key) VALUES (%s)"
                    " ON CONFLICT (key) DO NOTHING",
                    (key,),
                )
                row = conn.execute(sql, (key,)).fetchone()
        return int(row[0]) if row else 0

    def rewrite(
        self,
        key: str,
        keep: Callable[[Record], bool],
        before_replace: Callable[[list[Record]], None] | None = None,
    ) -> tuple[list[Record], list[Record]]:
        with self.connection() as conn, conn.transaction():
            rows = conn.execute(
                "SELECT seq, record FROM memhoncho_outbox WHERE key = %s ORDER BY seq FOR UPDATE",
                (key,),
            ).fetchall()
            records = [_record(seq, record) for seq, record in rows]
            kept = [r for r in records if keep(r)]
            dropped = [r for r in records if not keep(r)]
            if not dropped:
                return kept, []
            if before_replace is not None:
                before_replace(dropped)  # committed on its own connection before the delete
            _delete_records(conn, key, "seq = ANY(%(seqs)s)", [r["seq"] for r in dropped])
        return kept, dropped

    def compact_delivered(self) -> dict[str, int]:
        """One statement: delivered records (flagged by ``write_ledger`` in the transaction that
        moved ``delivered_seq``) leave the outbox; retention still looks at each pending one."""
        with self.connection() as conn:
            rows = conn.execute(
                "WITH d AS (DELETE FROM memhoncho_outbox WHERE delivered RETURNING key)"
                " SELECT key, count(*) FROM d GROUP BY key"
            ).fetchall()
        return {key: int(count) for key, count in rows}

    def remove_outbox(self, key: str) -> None:
        with self.connection() as conn:
            _delete_records(conn, key, "true", [])

    def conversation_keys(self) -> list[str]:
        with self.connection() as conn:
            return distinct_keys(conn, "memhoncho_outbox")

    def sweep_listing(self) -> SweepListing:
        """Conversations holding any record, with their ledger and edges, in one query.

        Once delivered records are compacted (``compact_delivered``) the outbox holds pending
        work only, so this reads the work, not the history. A ledger that does not validate is
        left out of ``seen``: the sweep reads it again and reports it.
        """
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT DISTINCT ON (o.key) o.key, o.seq, o.record,"
                " max(o.seq) OVER (PARTITION BY o.key), c.ledger"
                " FROM memhoncho_outbox o LEFT JOIN memhoncho_conversations c ON c.key = o.key"
                " ORDER BY o.key, o.seq"
            ).fetchall()
            count = conn.execute("SELECT count(*) FROM memhoncho_conversations").fetchone()
        seen: dict[str, Seen] = {}
        for key, seq, record, last_seq, ledger_doc in rows:
            try:
                ledger = Ledger.model_validate(ledger_doc) if ledger_doc is not None else None
            except ValidationError:
                continue
            last = cast(Record, {"seq": int(last_seq)})
            seen[key] = (ledger, _record(seq, record), last)
        keys = [row[0] for row in rows]
        listed = int(count[0]) if count else len(keys)
        return SweepListing(listed=listed, keys=keys, unchanged=listed - len(keys), seen=seen)


def _usual_append(
    conn: psycopg.Connection[Any], params: dict[str, Any]
) -> tuple[str, int, None, None, bool] | None:
    """``APPEND_SQL``'s capture, or None when the careful path must decide."""
    import psycopg

    try:
        row = conn.execute(APPEND_SQL, params, prepare=True).fetchone()
    except psycopg.errors.UniqueViolation:  # the same run, captured concurrently
        return None
    return None if row is None else ("captured", int(row[0]), None, None, bool(row[1]))


def _delete_records(conn: psycopg.Connection[Any], key: str, where: str, seqs: list[int]) -> None:
    """Delete some of a conversation's records; the pending ones leave its counters too."""
    conn.execute(
        f"WITH d AS (DELETE FROM memhoncho_outbox WHERE key = %(key)s AND {where}"
        "  RETURNING delivered, messages)"
        " UPDATE memhoncho_conversations SET"
        "  pending_batches = pending_batches - (SELECT count(*) FROM d WHERE NOT delivered),"
        "  pending_messages = pending_messages"
        "   - (SELECT coalesce(sum(messages), 0) FROM d WHERE NOT delivered)"
        " WHERE key = %(key)s",
        {"key": key, "seqs": seqs},
    )
