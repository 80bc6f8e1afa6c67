// Command cairn is Cairn's one binary: the store's roles (server, meta,
// chunk, gateway), the command-line client and the benchmark tool.
package main

import "cairn/cli"

func main() { cli.Execute() }
