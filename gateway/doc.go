// Package gateway serves Cairn's native HTTP API on top of package client:
// namespaces, files (streamed PUT, GET with Range and conditional
// requests, atomic append), listings, HTTP Basic authentication with
// cached access decisions, and a hot-object cache that serves small,
// frequently read objects with no hop at all.
//
// Routes (the README documents them for users):
//
//	GET    /                        namespaces the caller may see
//	GET    /.well-known/cairn       {"meta": ADDR}: where a mount finds meta
//	PUT    /{ns}[?visibility=V]     create a namespace, or change its visibility
//	DELETE /{ns}                    remove an empty namespace
//	GET    /{ns}/[dir/][?prefix=P&delimiter=/&limit=N&cursor=C]   list
//	PUT    /{ns}/{path}             write a file (streamed); trailing '/' = mkdir -p
//	GET    /{ns}/{path}             read (Range, If-None-Match, If-Modified-Since)
//	HEAD   /{ns}/{path}
//	GET    /{ns}/{path}?stat        attributes as JSON
//	POST   /{ns}/{path}?append      append the body atomically
//	POST   /{ns}/{path}?rename=/to  rename inside the namespace
//	DELETE /{ns}/{path}[?recursive]
//
// Every error is a status from the one table in errors.go and a JSON body
// {"error": {"code", "message", "path"}}.
package gateway
