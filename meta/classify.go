package meta

import (
	"path"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	"cairn/proto/metapb"
)

// Which calls need mounts' cooperation is derived from the API itself,
// not listed by hand (a list missed S3Copy, S3CompleteUpload and
// S3SetTags, so an S3 copy over a file a mount had closed behind was
// overwritten by the mount's later commit):
//
//   - A call is recalled for (dirty mounts whose queued changes concern
//     the names it carries, its scope, commit what they wrote behind
//     first, writebehind.go) when its request names a path in a
//     namespace: a field naming the namespace (ns, *_ns, bucket) beside
//     one naming a path in it (path, *_path, prefix, key, from, to), at
//     any depth; or names a whole namespace (NamespaceRequest: deleting
//     one refuses it while files are in it, queued ones included). The
//     session protocol itself (Mount* calls) is exempt: it is how mounts
//     announce and commit.
//   - A call's answer waits for every other mount session's
//     acknowledgement (session.go) when it is a command (its request is
//     one of metapb.Command's variants: the call proposes it) and events
//     were published while it ran: the events are exactly what mounts
//     cache by, so a call that changes what a mount may hold cannot
//     answer before the mounts dropped it. (A command that published
//     nothing but ran beside one that did waits too: a superset, one
//     loopback round trip to the mounts. Reads never wait: under two
//     mounts' creates in one directory, lookups waiting for the other
//     mount's acknowledgements cut creates/s by four.)

// dataMethods holds, by bare method name, the calls that read or change
// namespace data (see above); computed once from the service descriptor.
var dataMethods = func() map[string]bool {
	m := map[string]bool{}
	ms := metapb.File_proto_meta_proto.Services().ByName("Meta").Methods()
	for i := 0; i < ms.Len(); i++ {
		md := ms.Get(i)
		name := string(md.Name())
		if md.IsStreamingClient() || md.IsStreamingServer() || strings.HasPrefix(name, "Mount") {
			continue
		}
		m[name] = namesTreeData(md.Input(), 0)
	}
	return m
}()

// commandMethods holds, by bare method name, the calls whose request is a
// Command variant (see above).
var commandMethods = func() map[string]bool {
	variants := map[protoreflect.FullName]bool{}
	op := (&metapb.Command{}).ProtoReflect().Descriptor().Oneofs().ByName("op").Fields()
	for i := 0; i < op.Len(); i++ {
		if m := op.Get(i).Message(); m != nil {
			variants[m.FullName()] = true
		}
	}
	m := map[string]bool{}
	ms := metapb.File_proto_meta_proto.Services().ByName("Meta").Methods()
	for i := 0; i < ms.Len(); i++ {
		md := ms.Get(i)
		m[string(md.Name())] = variants[md.Input().FullName()]
	}
	return m
}()

// namesTreeData reports whether a message of type d names a path in a
// namespace, or a whole namespace.
func namesTreeData(d protoreflect.MessageDescriptor, depth int) bool {
	if d.Name() == "NamespaceRequest" {
		return true
	}
	if depth > 4 {
		return false
	}
	var ns, p bool
	fs := d.Fields()
	for i := 0; i < fs.Len(); i++ {
		f := fs.Get(i)
		n := string(f.Name())
		switch {
		case f.Kind() == protoreflect.StringKind && (n == "ns" || n == "bucket" || strings.HasSuffix(n, "_ns")):
			ns = true
		case f.Kind() == protoreflect.StringKind && (n == "path" || n == "prefix" || n == "key" || n == "from" || n == "to" || strings.HasSuffix(n, "_path")):
			p = true
		case f.Kind() == protoreflect.MessageKind && !f.IsMap() && namesTreeData(f.Message(), depth+1):
			return true
		}
	}
	return ns && p
}

// DataMethod reports whether the call of full method name (or its bare
// name) reads or changes namespace data: dirty mounts are recalled before
// it is served, and a mount orders it after the mkdirs it answered.
func DataMethod(method string) bool { return dataMethods[path.Base(method)] }

// scope is what one call's request names, read from its fields by the
// rule above: the mounts whose written-behind changes concern it are
// recalled before it is served, and only those (writebehind.go).
type scope struct {
	names    []string // nameKey of each path named; a namespace's root for the whole namespace
	prefixes []string // ns\x00prefix of each listing: every path that begins so
	inos     []uint64 // files named by inode number (ino, *_ino: an open file)
	unknown  bool     // the request names something that cannot be told: every dirty mount concerns it
}

// requestScope derives the scope of request m. An empty string field
// counts: a path "" is the namespace's root, a prefix "" lists all of
// it. A path field with no namespace beside it names no path (a nested
// message's own fields), but a namespace field left empty, or a request
// naming nothing at all, makes the scope unknown.
func requestScope(m protoreflect.Message) scope {
	var sc scope
	sc.add(m, 0)
	if len(sc.names)+len(sc.prefixes)+len(sc.inos) == 0 {
		sc.unknown = true
	}
	return sc
}

func (sc *scope) add(m protoreflect.Message, depth int) {
	d := m.Descriptor()
	if d.Name() == "NamespaceRequest" {
		if f := d.Fields().ByName("name"); f != nil {
			sc.names = append(sc.names, nameKey(m.Get(f).String(), ""))
			return
		}
	}
	if depth > 4 {
		sc.unknown = true
		return
	}
	// Paths go with the namespace of their role: src_path with src_ns,
	// path, key, from, to and prefix with ns or bucket.
	type pathField struct {
		role, v string
		prefix  bool
	}
	var paths []pathField
	ns := map[string]string{}
	fs := d.Fields()
	for i := 0; i < fs.Len(); i++ {
		f := fs.Get(i)
		n := string(f.Name())
		switch {
		case f.IsList() && f.Kind() == protoreflect.MessageKind:
			l := m.Get(f).List()
			for j := 0; j < l.Len(); j++ {
				sc.add(l.Get(j).Message(), depth+1)
			}
		case f.IsMap() || f.IsList():
		case f.Kind() == protoreflect.MessageKind:
			if m.Has(f) {
				sc.add(m.Get(f).Message(), depth+1)
			}
		case f.Kind() == protoreflect.Uint64Kind && (n == "ino" || strings.HasSuffix(n, "_ino")):
			if v := m.Get(f).Uint(); v != 0 {
				sc.inos = append(sc.inos, v)
			}
		case f.Kind() != protoreflect.StringKind:
		case n == "ns" || n == "bucket":
			ns[""] = m.Get(f).String()
		case strings.HasSuffix(n, "_ns"):
			ns[strings.TrimSuffix(n, "_ns")] = m.Get(f).String()
		case n == "path" || n == "key" || n == "from" || n == "to":
			paths = append(paths, pathField{"", m.Get(f).String(), false})
		case strings.HasSuffix(n, "_path"):
			paths = append(paths, pathField{strings.TrimSuffix(n, "_path"), m.Get(f).String(), false})
		case n == "prefix":
			paths = append(paths, pathField{"", m.Get(f).String(), true})
		}
	}
	for _, p := range paths {
		n, ok := ns[p.role]
		if !ok {
			n, ok = ns[""]
		}
		switch {
		case !ok:
		case n == "":
			sc.unknown = true
		case p.prefix:
			sc.prefixes = append(sc.prefixes, n+"\x00"+strings.TrimPrefix(p.v, "/"))
		default:
			sc.names = append(sc.names, nameKey(n, p.v))
		}
	}
}
