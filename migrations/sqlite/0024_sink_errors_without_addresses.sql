-- Every member of a workspace reads its audit sinks' `last_error`. A delivery refused because
-- the sink's host resolved to an address the sinks may not reach (loopback, private,
-- link-local, metadata) used to be recorded with that address, which tells members where an
-- internal name points; such errors now say only that the destination is not allowed.
UPDATE audit_sinks
SET last_error = 'destination not allowed'
WHERE last_error LIKE 'destination `%` is not a public address%';
