"""The shop's jobs. The App has no DSN: sqljobs.contrib.django points it at Django's
database, and `manage.py sqljobs worker` and `scheduler` serve it (settings.SQLJOBS["APP"])."""

from pydantic import BaseModel

from shop.models import Order
from sqljobs import App, JobContext

app = App()


class Ship(BaseModel):
    order_id: int
    email: str


@app.job(name="shop.ship_order", queue="shipping")
def ship_order(ctx: JobContext, ship: Ship) -> dict[str, int]:
    # A sync handler runs in a worker thread: the Django ORM works as in a view.
    Order.objects.filter(id=ship.order_id).update(shipped=True)
    return {"shipped": ship.order_id}


@app.task(cron="0 3 * * *", name="shop.unshipped_report", queue="shipping")
def unshipped_report(ctx: JobContext) -> dict[str, int]:
    # `manage.py sqljobs scheduler` fires it at 03:00 UTC; a worker runs it.
    return {"unshipped": Order.objects.filter(shipped=False).count()}
