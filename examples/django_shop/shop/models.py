from django.db import models


class Order(models.Model):
    email = models.EmailField()
    amount = models.IntegerField()
    shipped = models.BooleanField(default=False)
