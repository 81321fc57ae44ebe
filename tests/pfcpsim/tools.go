//go:build tools

// Package tools names the two pfcpsim commands so that `go build` of them resolves inside
// this module. Requiring pfcpsim at an exact version here is what lets the Go module proxy
// serve it: `go install ...@v1.4.4` asks the proxy for the version list first, which it
// refuses.
package tools

import (
	_ "github.com/omec-project/pfcpsim/cmd/pfcpctl"
	_ "github.com/omec-project/pfcpsim/cmd/pfcpsim"
)
