package s3

import (
	"encoding/xml"
	"net/http"

	"cairn/errors"
)

// codes is the one translation table from Kind to S3 error code and HTTP
// status at this edge. Errors that only S3 has (SignatureDoesNotMatch,
// InvalidPart, ...) are built directly as *apiError where they arise.
var codes = map[errors.Kind]apiError{
	errors.Invalid:         {http.StatusBadRequest, "InvalidArgument", ""},
	errors.NameTooLong:     {http.StatusBadRequest, "KeyTooLongError", ""},
	errors.BadDigest:       {http.StatusBadRequest, "BadDigest", ""},
	errors.Unauthenticated: {http.StatusForbidden, "AccessDenied", ""},
	errors.Permission:      {http.StatusForbidden, "AccessDenied", ""},
	errors.NotExist:        {http.StatusNotFound, "NoSuchKey", ""},
	errors.Exist:           {http.StatusConflict, "BucketAlreadyExists", ""},
	errors.NotEmpty:        {http.StatusConflict, "BucketNotEmpty", ""},
	errors.IsDir:           {http.StatusConflict, "InvalidRequest", ""},
	errors.NotDir:          {http.StatusConflict, "InvalidRequest", ""},
	errors.Precondition:    {http.StatusPreconditionFailed, "PreconditionFailed", ""},
	errors.TooLarge:        {http.StatusBadRequest, "EntityTooLarge", ""},
	errors.Range:           {http.StatusRequestedRangeNotSatisfiable, "InvalidRange", ""},
	errors.Corrupt:         {http.StatusInternalServerError, "InternalError", ""},
	errors.IO:              {http.StatusInternalServerError, "InternalError", ""},
	errors.Other:           {http.StatusInternalServerError, "InternalError", ""},
	errors.Unavailable:     {http.StatusServiceUnavailable, "ServiceUnavailable", ""},
	errors.ReadOnly:        {http.StatusServiceUnavailable, "ServiceUnavailable", ""},
	errors.Stale:           {http.StatusServiceUnavailable, "ServiceUnavailable", ""},
	errors.Canceled:        {499, "RequestCanceled", ""},
	// S3 has no code for a full store; 507 with the name its clients print.
	errors.NoSpace:  {http.StatusInsufficientStorage, "InsufficientStorage", ""},
	errors.DataLoss: {http.StatusInternalServerError, "DataLoss", ""},
}

// apiError is an S3 error: status, code and message.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func apiErr(status int, code, msg string) *apiError { return &apiError{status, code, msg} }

// S3-only errors, named as S3 names them.
func errSignature() *apiError {
	return apiErr(http.StatusForbidden, "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided.")
}
func errNoSuchBucket() *apiError {
	return apiErr(http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist")
}
func errNoSuchUpload() *apiError {
	return apiErr(http.StatusNotFound, "NoSuchUpload", "The specified multipart upload does not exist.")
}
func errMalformedXML() *apiError {
	return apiErr(http.StatusBadRequest, "MalformedXML", "The XML you provided was not well-formed or did not validate against our published schema.")
}
func errInvalidRequest(msg string) *apiError {
	return apiErr(http.StatusBadRequest, "InvalidRequest", msg)
}
func errNotImplemented(msg string) *apiError {
	return apiErr(http.StatusNotImplemented, "NotImplemented", msg)
}

// notExistAs turns a NotExist into the S3 error that names what is
// missing (NoSuchBucket, NoSuchUpload); other errors pass unchanged.
func notExistAs(err error, e *apiError) error {
	if err != nil && errors.KindOf(err) == errors.NotExist {
		return e
	}
	return err
}

// toAPI finds the S3 error for err.
func toAPI(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	k := errors.KindOf(err)
	c, ok := codes[k]
	if !ok {
		c = codes[errors.Other]
	}
	msg := err.Error()
	var ce *errors.Error
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	c.message = msg
	return &c
}

type errorXML struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string   `xml:"Code"`
	Message   string   `xml:"Message"`
	Resource  string   `xml:"Resource,omitempty"`
	RequestID string   `xml:"RequestId"`
}

// writeError sends err as an S3 XML error and returns the status.
func writeError(w http.ResponseWriter, r *http.Request, err error) int {
	e := toAPI(err)
	h := w.Header()
	for _, k := range []string{"Content-Length", "ETag", "Last-Modified", "Accept-Ranges", "Content-Range", "Content-Encoding", "Content-Disposition"} {
		h.Del(k)
	}
	if r.Method == http.MethodHead {
		// A HEAD answer has no body; SDKs read the status alone.
		w.WriteHeader(e.status)
		return e.status
	}
	body := errorXML{Code: e.code, Message: e.message, Resource: r.URL.Path, RequestID: h.Get("x-amz-request-id")}
	writeXML(w, e.status, body)
	return e.status
}

func writeXML(w http.ResponseWriter, status int, v any) {
	out, err := xml.Marshal(v)
	if err != nil {
		status, out = http.StatusInternalServerError, []byte("<Error><Code>InternalError</Code></Error>")
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	w.Write([]byte(xml.Header))
	w.Write(out)
}
