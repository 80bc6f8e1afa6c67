package cli

import "github.com/spf13/cobra"

// benchMetaCommands is `cairn bench meta`, once package meta can dial.
func benchMetaCommands() []*cobra.Command { return nil }
