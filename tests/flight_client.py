"""The Arrow Flight SQL client of tests/cli/flight.rs.

Runs the steps of a JSON plan (argv[1]) against `lockstep serve --flight-listen` with ADBC
(PyPI `adbc-driver-flightsql`) and raw `pyarrow.flight` calls, and prints one JSON line per step:
the columns (name, Arrow type) and rows of a query, or the error; the catalog objects; the
outcome of malformed requests.
"""

import datetime
import json
import sys

import adbc_driver_flightsql.dbapi as flight_sql
from adbc_driver_flightsql import DatabaseOptions


def cell(v):
    if isinstance(v, datetime.datetime):
        return {"ts": v.isoformat(), "tz": v.utcoffset().total_seconds() if v.tzinfo else None}
    return v if v is None or isinstance(v, (int, float, str, bool)) else str(v)


def connect(plan):
    options = {}
    if plan.get("token"):
        options[DatabaseOptions.AUTHORIZATION_HEADER.value] = "Bearer " + plan["token"]
    if plan.get("password") is not None:
        options["username"] = plan.get("username", "lockstep")
        options["password"] = plan["password"]
    if plan.get("tls_root"):
        with open(plan["tls_root"]) as f:
            options[DatabaseOptions.TLS_ROOT_CERTS.value] = f.read()
    return flight_sql.connect(plan["uri"], db_kwargs=options, autocommit=True)


def error(e):
    return {"error": type(e).__name__, "message": str(e).strip()}


def query(conn, sql, params=None):
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            table = cur.fetch_arrow_table()
        return {
            "columns": [[f.name, str(f.type)] for f in table.schema],
            "rows": [[cell(v) for v in row.values()] for row in table.to_pylist()],
        }
    except Exception as e:  # noqa: BLE001 - the test asserts on the message
        return error(e)


def objects(conn):
    try:
        tables = []
        for catalog in conn.adbc_get_objects(depth="tables").read_all().to_pylist():
            for schema in catalog["catalog_db_schemas"] or []:
                for table in schema["db_schema_tables"] or []:
                    tables.append([catalog["catalog_name"], schema["db_schema_name"], table["table_name"]])
        samples = conn.adbc_get_table_schema("samples")
        info = conn.adbc_get_info()
        return {
            "tables": tables,
            "samples": [[f.name, str(f.type)] for f in samples],
            "vendor": info.get("vendor_name"),
        }
    except Exception as e:  # noqa: BLE001
        return error(e)


def field(number, value):
    """A protobuf length-delimited field."""
    n, length = len(value), b""
    while True:
        length += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            break
    return bytes([number << 3 | 2]) + length + value


def packed(name, value):
    """A protobuf Any {type_url = 1, value = 2} of a Flight SQL message."""
    return field(1, b"type.googleapis.com/arrow.flight.protocol.sql." + name) + field(2, value)


def flight_client(uri, token):
    import pyarrow.flight as fl

    headers = [(b"authorization", b"Bearer " + token.encode())] if token else []
    return fl.FlightClient(uri), fl.FlightCallOptions(headers=headers)


def cancel(uri, token, sql):
    """Runs `sql` with GetFlightInfo and DoGet, and cancels it after 1 s with the
    CancelFlightInfo action."""
    import threading
    import time

    import pyarrow.flight as fl

    client, options = flight_client(uri, token)
    command = packed(b"CommandStatementQuery", field(1, sql.encode()))
    info = client.get_flight_info(fl.FlightDescriptor.for_command(command), options)
    out = {}

    def cancel_later():
        time.sleep(1.0)
        try:
            action = fl.Action("CancelFlightInfo", field(1, info.serialize()))
            out["cancel"] = [r.body.to_pybytes().hex() for r in client.do_action(action, options)]
        except Exception as e:  # noqa: BLE001
            out["cancel"] = type(e).__name__ + ": " + str(e).splitlines()[0]

    thread = threading.Thread(target=cancel_later)
    thread.start()
    started = time.time()
    try:
        client.do_get(info.endpoints[0].ticket, options).read_all()
        out["query"] = "ok"
    except BaseException as e:  # noqa: BLE001 - pyarrow re-raises CANCELLED as KeyboardInterrupt
        cause = e if isinstance(e, Exception) else (e.__context__ or e)
        out["query"] = type(cause).__name__ + ": " + str(cause).splitlines()[0]
    out["seconds"] = round(time.time() - started, 1)
    thread.join()
    return out


def raw(uri, token):
    """Malformed requests over plain pyarrow.flight: each must fail with a status, not kill
    the server."""
    import pyarrow.flight as fl

    client, options = flight_client(uri, token)
    out = {}

    def attempt(name, call):
        try:
            call()
            out[name] = "ok"
        except Exception as e:  # noqa: BLE001
            out[name] = type(e).__name__ + ": " + str(e).splitlines()[0]

    # A TicketStatementQuery whose handle (field 1) is not UTF-8.
    bad_sql = packed(b"TicketStatementQuery", field(1, b"\x00" * 8 + b"\xff\xfe"))
    attempt("garbage_ticket", lambda: client.do_get(fl.Ticket(b"\xff\x00garbage"), options).read_all())
    attempt("bad_utf8_ticket", lambda: client.do_get(fl.Ticket(bad_sql), options).read_all())
    attempt("garbage_command", lambda: client.get_flight_info(fl.FlightDescriptor.for_command(b"\x0a\xff"), options))
    attempt(
        "garbage_action",
        lambda: list(client.do_action(fl.Action("CreatePreparedStatement", b"\x01\x02\x03"), options)),
    )
    attempt("unknown_action", lambda: list(client.do_action(fl.Action("DropEverything", b""), options)))
    # A prepared statement handle this server never issued.
    handle = packed(b"CommandPreparedStatementQuery", field(1, b"abcd"))
    attempt("unknown_handle", lambda: client.do_get(fl.Ticket(handle), options).read_all())

    def update():
        import pyarrow as pa

        command = packed(b"CommandStatementUpdate", field(1, b"DELETE FROM samples"))
        writer, _ = client.do_put(fl.FlightDescriptor.for_command(command), pa.schema([]), options)
        writer.close()

    attempt("update", update)
    return out


def main():
    plan = json.loads(sys.argv[1])
    if plan.get("raw"):
        print(json.dumps(raw(plan["uri"], plan.get("token"))))
        return
    if plan.get("cancel"):
        print(json.dumps(cancel(plan["uri"], plan.get("token"), plan["cancel"])))
        return
    try:
        conn = connect(plan)
        # ADBC connects lazily: the first call authenticates.
        conn.adbc_get_info()
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"connect_error": error(e)}))
        return
    for step in plan["steps"]:
        if step.get("objects"):
            print(json.dumps(objects(conn)))
        else:
            print(json.dumps(query(conn, step["sql"], step.get("params"))))
    conn.close()


if __name__ == "__main__":
    main()
