#!/usr/bin/env python3
"""Shows with PyMongo (OpenSSL) that the proxy's TLS termination is real TLS.

Env: PROXY_URI (TLS proxy, mongodb://localhost:PORT/?tls=true&directConnection=true),
PROXY_MTLS_URI (the same, requiring a client certificate), CA_FILE, UNTRUSTED_CA_FILE,
CLIENT_FILE (client certificate and key). Exits non-zero on any mismatch.
"""

import os
import sys
import time

import pymongo
from pymongo.errors import AutoReconnect, OperationFailure, PyMongoError, ServerSelectionTimeoutError

FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def refused(uri, what, **kw):
    try:
        pymongo.MongoClient(uri, serverSelectionTimeoutMS=2000, **kw).admin.command("ping")
        check(False, what + " (it connected)")
    except ServerSelectionTimeoutError as e:
        text = str(e)
        check("CERTIFICATE_VERIFY_FAILED" in text, what + ": " + text[:160])


def main():
    uri, mtls = os.environ["PROXY_URI"], os.environ["PROXY_MTLS_URI"]
    ca, untrusted, client_pem = (os.environ[k] for k in ("CA_FILE", "UNTRUSTED_CA_FILE", "CLIENT_FILE"))

    c = pymongo.MongoClient(uri, tlsCAFile=ca, serverSelectionTimeoutMS=5000)
    check(c.admin.command("ping").get("ok") == 1.0, "ping over TLS with tlsCAFile")
    coll = c.pymongo_tls.docs
    coll.drop()
    coll.insert_many([{"n": i, "pad": "x" * 200} for i in range(300)])
    check(coll.count_documents({}) == 300, "300 documents written and counted over TLS")
    check(len(list(coll.find())) == 300, "300 documents read back over TLS")

    # Fail points over TLS: an error code, a closed connection, a blocked command.
    c.admin.command({"configureFailPoint": "failCommand", "mode": {"times": 1},
                     "data": {"failCommands": ["find"], "errorCode": 2}})
    try:
        coll.find_one()
        check(False, "failCommand errorCode over TLS")
    except OperationFailure as e:
        check(e.code == 2, "failCommand errorCode over TLS")
    c.admin.command({"configureFailPoint": "failCommand", "mode": {"times": 1},
                     "data": {"failCommands": ["count"], "closeConnection": True}})
    try:
        c.pymongo_tls.command("count", "docs")
        check(False, "failCommand closeConnection over TLS")
    except AutoReconnect:
        check(True, "failCommand closeConnection over TLS")
    c.admin.command({"configureFailPoint": "failCommand", "mode": {"times": 1},
                     "data": {"failCommands": ["ping"], "blockConnection": True, "blockTimeMS": 300}})
    started = time.monotonic()
    c.admin.command("ping")
    check(time.monotonic() - started >= 0.29, "failCommand blockConnection over TLS")
    c.close()

    refused(uri, "refused without the CA")
    refused(uri, "refused with an unrelated CA", tlsCAFile=untrusted)

    m = pymongo.MongoClient(mtls, tlsCAFile=ca, tlsCertificateKeyFile=client_pem,
                            serverSelectionTimeoutMS=5000)
    check(m.admin.command("ping").get("ok") == 1.0, "mutual TLS with tlsCertificateKeyFile")
    m.close()
    try:
        pymongo.MongoClient(mtls, tlsCAFile=ca, serverSelectionTimeoutMS=2000).admin.command("ping")
        check(False, "mutual TLS refuses a client without a certificate (it connected)")
    except PyMongoError as e:
        check(True, "mutual TLS refuses a client without a certificate: " + str(e)[:120])

    print(f"{len(FAILURES)} failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
