package cli

import "github.com/spf13/cobra"

// roleCommands are the commands that run the store (server.go).
func roleCommands() []*cobra.Command { return serverCommands() }
