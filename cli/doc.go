// Package cli is the cairn command: the client commands (put, get, ls,
// ...), namespace and admin commands, the load generator, and the server
// roles (roles.go). cmd/cairn's main only calls Execute.
package cli
