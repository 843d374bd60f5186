"""Beanie 2 on a backpressure client: init_beanie takes a database of AsyncMongoClient."""

import asyncio

import beanie

import backpressure
from backpressure.testing import EmbeddedServer


class Order(beanie.Document):
    sku: int


async def main() -> None:
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
        client = backpressure.AsyncMongoClient(server.uri)
        await beanie.init_beanie(database=client.shop, document_models=[Order])
        await Order(sku=1).insert()
        print("retries:", backpressure.stats(client).retries)  # retries: 2
        print("orders:", await Order.find_all().count())  # orders: 1
        await client.close()


asyncio.run(main())
