"""The application facade: `App` (its declarations over its pools) and the run-time
managers of what is stored (limits, schedules). Above the runtime: `App.run_worker`
starts one."""

from sqljobs._app.app import App
from sqljobs._app.backfills import BackfillHandle, Batch
from sqljobs._app.consumers import (
    ConsumerBatch,
    ConsumerFenced,
    ConsumerHandle,
    ConsumerSelfEnqueue,
    Source,
    TableSource,
)
from sqljobs._app.ledger import LedgerHandle
from sqljobs._app.limits import Limits
from sqljobs._app.maintenance import PurgeHandle, PurgeTable
from sqljobs._app.schedules import Schedules
from sqljobs._app.search import Document, PostgresSearchIndex, SearchIndex
from sqljobs._app.transfer import ImportPage, TransferRefused
from sqljobs._app.webhook_receiver import ReceivedEvent, WebhookReceiver
from sqljobs._app.webhooks import WebhookEvent, WebhookFailed, WebhookHandle

__all__ = [
    "App",
    "BackfillHandle",
    "Batch",
    "ConsumerBatch",
    "ConsumerFenced",
    "ConsumerHandle",
    "ConsumerSelfEnqueue",
    "Document",
    "ImportPage",
    "LedgerHandle",
    "Limits",
    "PostgresSearchIndex",
    "PurgeHandle",
    "PurgeTable",
    "ReceivedEvent",
    "Schedules",
    "SearchIndex",
    "Source",
    "TableSource",
    "TransferRefused",
    "WebhookEvent",
    "WebhookFailed",
    "WebhookHandle",
    "WebhookReceiver",
]
