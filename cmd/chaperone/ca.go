package main

import (
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/chaperone-dev/chaperone/certs"
)

func newCACommand(e env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Manage the certificate authority that signs intercepted connections",
		Long: "Chaperone intercepts TLS with certificates signed by its own CA, created on first use\n" +
			"in the state directory (key mode 0600). Sessions of `chaperone run` trust it through\n" +
			"environment variables. `chaperone ca install` (as root) also puts it in the system trust\n" +
			"store and sets the trust variables for new login sessions, for agents the daemon finds;\n" +
			"`chaperone ca uninstall` undoes exactly that.",
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
	install := &cobra.Command{
		Use:   "install",
		Short: "Put the CA in the system trust store and set the trust variables for new login sessions (root)",
		Long: "Adds the CA to the system trust store (update-ca-certificates on Debian and Ubuntu,\n" +
			"update-ca-trust on Fedora, RHEL and Arch), writes " + certs.BundlePath + "\n" +
			"(the system roots and the CA) and " + certs.ProfileDropIn + " and\n" +
			certs.EnvironmentDropIn + ", which point SSL_CERT_FILE, NODE_EXTRA_CA_CERTS,\n" +
			"REQUESTS_CA_BUNDLE and the like at it. Creates the CA if needed. Running it again changes nothing.\n" +
			"macOS: not done here; see docs/proxy.md.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd, e)
			if err != nil {
				return err
			}
			ca, _, err := certs.LoadOrCreate(cfg.StateDir, time.Now, rand.Reader)
			if err != nil {
				return err
			}
			inst, err := certs.Install(ca, certs.InstallOptions{})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "CA added to the %s trust store: %s (%s)\n", inst.Store, inst.Anchor, strings.Join(inst.Command, " "))
			fmt.Fprintf(w, "bundle: %s\n", inst.Bundle)
			fmt.Fprintf(w, "trust variables for new login sessions: %s\n", strings.Join(inst.DropIns, ", "))
			return nil
		},
	}
	uninstall := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove what `chaperone ca install` added (root)",
		Long: "Removes the CA from the system trust store, the bundle and the drop-ins that\n" +
			"`chaperone ca install` wrote, and only those: a file edited since so that it is no\n" +
			"longer Chaperone's is left. The CA itself stays in the state directory.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := certs.Uninstall(certs.InstallOptions{}); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "CA removed from the system trust store; trust variables removed")
			return nil
		},
	}
	cmd.AddCommand(path, export, initCmd, install, uninstall)
	return cmd
}
