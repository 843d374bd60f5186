"""MongoEngine on a backpressure client: connect() builds it with mongo_client_class."""

import mongoengine

import backpressure
from backpressure.testing import EmbeddedServer


class Order(mongoengine.Document):
    sku = mongoengine.IntField()


with EmbeddedServer("standalone") as server:
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
    # a pymongo.MongoClient subclass, built by MongoEngine with its own arguments
    client_class = backpressure.MongoClient
    mongoengine.connect("shop", host=server.uri, mongo_client_class=client_class)
    Order(sku=1).save()
    client = mongoengine.get_connection()
    print("retries:", backpressure.stats(client).retries)  # retries: 2
    print("orders:", Order.objects.count())  # orders: 1
    mongoengine.disconnect()
