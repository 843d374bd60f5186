"""Django MongoDB Backend: enable backpressure on its client when Django connects.

The backend builds one pymongo MongoClient per database alias; Django's connection_created
signal hands it over, and backpressure.enable() turns the retries on for it.
"""

import django
from django.conf import settings

import backpressure
from backpressure.testing import EmbeddedServer

with EmbeddedServer("standalone") as server:
    settings.configure(
        DATABASES={
            "default": {
                "ENGINE": "django_mongodb_backend",
                "HOST": server.uri,
                "NAME": "shop",
            }
        },
        INSTALLED_APPS=["__main__"],  # this file is the app: Order below is its model
        DEFAULT_AUTO_FIELD="django_mongodb_backend.fields.ObjectIdAutoField",
    )
    django.setup()

    from django.db import connection, models
    from django.db.backends.signals import connection_created

    def enable_backpressure(sender, connection, **kwargs):
        """Turn backpressure on for the backend's client (once: it is shared)."""
        client = connection.connection
        if connection.vendor == "mongodb" and not backpressure.is_enabled(client):
            backpressure.enable(client)

    connection_created.connect(enable_backpressure)

    class Order(models.Model):
        sku = models.IntegerField()

    with connection.schema_editor() as editor:
        editor.create_model(Order)
    # the first two inserts are shed with the overload error
    server.configure_fail_point(
        {
            "mode": {"times": 2},
            "data": {
                "failCommands": ["insert"],
                "errorCode": 462,
                "errorLabels": ["SystemOverloadedError", "RetryableError"],
            },
        }
    )
    Order.objects.create(sku=1)
    print("retries:", backpressure.stats(connection.connection).retries)  # retries: 2
    print("orders:", len(Order.objects.filter(sku=1)))  # orders: 1
    connection.close_pool()
