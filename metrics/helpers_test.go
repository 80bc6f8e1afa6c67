package metrics

import (
	"io"
	"net/http"
	"strings"
)

func bufCopy(b *strings.Builder, resp *http.Response) (int64, error) {
	defer resp.Body.Close()
	return io.Copy(b, resp.Body)
}
