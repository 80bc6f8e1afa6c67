//go:build !linux

package volume

import "os"

func datasync(f *os.File) error { return f.Sync() }
