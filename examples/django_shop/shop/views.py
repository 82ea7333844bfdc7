import json

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

import sqljobs.contrib.django
from shop.jobs import Ship, ship_order
from shop.models import Order


class OutOfStock(Exception):
    pass


@csrf_exempt
@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    data = json.loads(request.body)
    try:
        with transaction.atomic():
            order = Order.objects.create(email=data["email"], amount=data["amount"])
            # The job is written in this transaction, on Django's own connection: it
            # exists if and only if the order commits (no on_commit hook to lose).
            ship_order.enqueue(Ship(order_id=order.id, email=order.email),
                               key=f"ship:{order.id}",
                               conn=sqljobs.contrib.django.connection())
            if order.amount > 100:  # found out after writing: everything rolls back
                raise OutOfStock(f"only 100 in stock, {order.amount} ordered")
    except OutOfStock as error:
        return JsonResponse({"error": str(error)}, status=409)
    return JsonResponse({"order": order.id}, status=201)
