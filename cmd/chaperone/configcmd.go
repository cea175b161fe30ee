package main

import (
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/chaperone-dev/chaperone/config"
)

// addConfigFlags registers the configuration flags shared by every command.
func addConfigFlags(fs *pflag.FlagSet) {
	fs.String("config", "", "configuration file (YAML); default: $CHAPERONE_CONFIG, else built-in defaults")
	config.BindFlags(fs)
}

// loadConfig reads the effective configuration for cmd: defaults, then the
// file, then CHAPERONE_* variables, then the flags the user set.
func loadConfig(cmd *cobra.Command, e env) (config.Config, error) {
	file, _ := cmd.Flags().GetString("config")
	cfg, err := config.Load(config.LoadOptions{
		File:    file,
		Env:     e.getenv,
		Environ: e.environ(),
		Flags:   cmd.Flags(),
		EUID:    os.Geteuid(),
	})
	if err != nil {
		return cfg, usageError{err}
	}
	return cfg, nil
}

func newConfigCommand(e env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Inspect Chaperone's configuration",
	}
	show := &cobra.Command{
		Use:   "show",
		Short: "Print the effective configuration (defaults, file, environment and flags applied)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd, e)
			if err != nil {
				return err
			}
			b, err := cfg.YAML()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
	cmd.AddCommand(show)
	return cmd
}
