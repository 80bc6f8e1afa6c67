// Package api is a Go client for Cairn's native HTTP API, the one the
// gateway serves: namespaces, files and directories, listing, append and
// rename. Every method streams (a Put never holds a whole file in memory)
// and reuses keep-alive connections from one pooled transport, so a client
// shared by many goroutines costs one TCP connection per concurrent request.
//
// Failures are *errors.Error values whose Kind comes from the API's error
// code (NoSuchKey is errors.NotExist, and so on; see codes.go), so callers
// test them the same way as errors from any other Cairn package:
//
//	if errors.Is(errors.NotExist, err) { ... }
package api
