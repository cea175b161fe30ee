package main

import (
	"crypto/rand"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/chaperone-dev/chaperone/certs"
)

func newCACommand(e env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Manage the certificate authority that signs intercepted connections",
		Long: "Chaperone intercepts TLS with certificates signed by its own CA, created on first use\n" +
			"in the state directory (key mode 0600). Sessions trust it through environment variables;\n" +
			"the system trust store is never changed.",
	}
	path := &cobra.Command{
		Use:   "path",
		Short: "Print the path of the CA certificate (PEM)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd, e)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), certs.CertFile(cfg.StateDir))
			return nil
		},
	}
	export := &cobra.Command{
		Use:   "export",
		Short: "Print the CA certificate (PEM), creating the CA if needed",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd, e)
			if err != nil {
				return err
			}
			ca, _, err := certs.LoadOrCreate(cfg.StateDir, time.Now, rand.Reader)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(ca.PEM())
			return err
		},
	}
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Create the CA if it does not exist and print where it is",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd, e)
			if err != nil {
				return err
			}
			_, created, err := certs.LoadOrCreate(cfg.StateDir, time.Now, rand.Reader)
			if err != nil {
				return err
			}
			verb := "exists"
			if created {
				verb = "created"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "CA %s: %s (key %s, mode 0600)\n", verb, certs.CertFile(cfg.StateDir), certs.KeyFile(cfg.StateDir))
			return nil
		},
	}
	cmd.AddCommand(path, export, initCmd)
	return cmd
}
