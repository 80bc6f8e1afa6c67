package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"cairn/api"
	"cairn/pathname"
)

func nsCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ns",
		Short: "Create, list, remove namespaces and set who may read them",
	}
	var public bool
	var class string
	create := &cobra.Command{
		Use:   "create NAME [--public] [--class CLASS]",
		Short: "Create a namespace (private unless --public; replicated unless --class)",
		Args:  nArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			vis := api.Private
			if public {
				vis = api.Public
			}
			return withNamespace(o, args[0], func(c *api.Client) error {
				_, err := c.CreateNamespaceClass(cmd.Context(), args[0], vis, class)
				return err
			})
		},
	}
	create.Flags().BoolVar(&public, "public", false, "anyone may read it, without credentials")
	create.Flags().StringVar(&class, "class", "", `storage class: "replicated" (default), "ec-K+M", or one meta's --class names`)
	long := false
	ls := &cobra.Command{
		Use:   "ls [-l]",
		Short: "List namespaces",
		Args:  nArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			return (&lister{c: c, w: cmd.OutOrStdout(), long: long}).namespaces(cmd.Context())
		},
	}
	ls.Flags().BoolVarP(&long, "long", "l", false, "show visibility, owner and creation time")
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove an empty namespace",
		Args:  nArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withNamespace(o, args[0], func(c *api.Client) error {
				return c.DeleteNamespace(cmd.Context(), args[0])
			})
		},
	}
	vis := &cobra.Command{
		Use:   "set-visibility NAME public|private",
		Short: "Make a namespace public (anyone may read) or private",
		Args:  nArgs(2, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			v := api.Visibility(args[1])
			if v != api.Public && v != api.Private {
				return fmt.Errorf("visibility must be public or private, not %q", args[1])
			}
			return withNamespace(o, args[0], func(c *api.Client) error {
				_, err := c.SetVisibility(cmd.Context(), args[0], v)
				return err
			})
		},
	}
	cmd.AddCommand(create, ls, rm, vis)
	return cmd
}

// withNamespace validates a namespace name, then calls f with a client.
func withNamespace(o *options, name string, f func(*api.Client) error) error {
	if err := pathname.ValidNamespace(name); err != nil {
		return fmt.Errorf("bad namespace name %q: %s", name, messageOf(err))
	}
	c, err := o.client()
	if err != nil {
		return err
	}
	return f(c)
}
