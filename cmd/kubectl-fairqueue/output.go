package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// outputAPIVersion versions the plugin's -o json|yaml objects: fields may be
// added within it, never renamed or removed.
const outputAPIVersion = "kubectl-fairqueue/v1"

// outputFlag is a command's -o/--output: the command's own tables (the
// first is the default) or an object through k8s.io/cli-runtime's JSON and
// YAML printers, as kubectl prints them.
type outputFlag struct {
	format   string
	tables   []string
	jsonYAML *genericclioptions.JSONYamlPrintFlags
}

// add registers -o on cmd with its table formats, and checks the value
// before the command runs, so a bad -o fails before any API call.
func (o *outputFlag) add(cmd *cobra.Command, tables ...string) {
	o.tables, o.format, o.jsonYAML = tables, tables[0], genericclioptions.NewJSONYamlPrintFlags()
	cmd.Flags().StringVarP(&o.format, "output", "o", o.format, fmt.Sprintf("Output format. One of: (%s).", strings.Join(o.allowed(), ", ")))
	cmd.PreRunE = func(*cobra.Command, []string) error { return o.validate() }
}

// allowed lists the formats -o takes.
func (o *outputFlag) allowed() []string {
	var names []string
	for _, t := range o.tables {
		if t != "" {
			names = append(names, t)
		}
	}
	return append(names, o.jsonYAML.AllowedFormats()...)
}

func (o *outputFlag) validate() error {
	if o.table() {
		return nil
	}
	if _, err := o.jsonYAML.ToPrinter(o.format); err != nil {
		return fmt.Errorf("unknown output format -o %q: use one of %s", o.format, strings.Join(o.allowed(), ", "))
	}
	return nil
}

// table reports whether -o selects one of the command's own tables.
func (o *outputFlag) table() bool { return slices.Contains(o.tables, o.format) }

// print writes v, which marshals to an object with apiVersion and kind, in
// the -o format.
func (o *outputFlag) print(w io.Writer, v any) error {
	p, err := o.jsonYAML.ToPrinter(o.format)
	if err != nil {
		return err
	}
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return p.PrintObj(&runtime.Unknown{Raw: data, ContentType: runtime.ContentTypeJSON}, w)
}
