// Package otelroute: see doc.go.
package otelroute
