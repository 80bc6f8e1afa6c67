package meta

// TEMPORARY (tier4 debugging of issue 20): not to be merged.

import (
	"fmt"
	"os"
	"runtime"

	"cairn/proto/metapb"
	"time"
)

var dbgOn = os.Getenv("CAIRN_TIER4_DEBUG") != ""

func dbgf(format string, args ...any) {
	if !dbgOn {
		return
	}
	fmt.Fprintf(os.Stderr, "DBG %s %s\n", time.Now().Format("15:04:05.000000"), fmt.Sprintf(format, args...))
}

func dbgCaller() string {
	s := ""
	for i := 2; i < 5; i++ {
		pc, _, line, ok := runtime.Caller(i)
		if !ok {
			break
		}
		s += fmt.Sprintf(" %s:%d", runtime.FuncForPC(pc).Name(), line)
	}
	return s
}

func dbgExts(exts []*metapb.Extent) string {
	s := ""
	for _, e := range exts {
		s += fmt.Sprintf(" %d/%d", e.Volume, e.Key)
	}
	return s
}
