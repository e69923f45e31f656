import ctypes, sys
cu = ctypes.CDLL("libcuda.so.1")
def ck(r, what):
    if r != 0: raise SystemExit(f"{what}: CUresult {r}")
ck(cu.cuInit(0), "init")
dev = ctypes.c_int(); ck(cu.cuDeviceGet(ctypes.byref(dev), 0), "dev")
ctx = ctypes.c_void_p(); ck(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "ctx"); ck(cu.cuCtxSetCurrent(ctx), "set")
class Cfg(ctypes.Structure):
    _fields_ = [("gx",ctypes.c_uint),("gy",ctypes.c_uint),("gz",ctypes.c_uint),("bx",ctypes.c_uint),("by",ctypes.c_uint),("bz",ctypes.c_uint),("smem",ctypes.c_uint),("stream",ctypes.c_void_p),("attrs",ctypes.c_void_p),("nattrs",ctypes.c_uint)]
for path, name, threads, c in [(a, b, int(t), int(cl)) for a,b,t,cl in (x.split(':') for x in sys.argv[1:])]:
    data = open(path,'rb').read()
    mod = ctypes.c_void_p(); ck(cu.cuModuleLoadData(ctypes.byref(mod), data), "load")
    f = ctypes.c_void_p(); ck(cu.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()), "func")
    cfg = Cfg(c*64,1,1,threads,1,1,0,None,None,0)
    n = ctypes.c_int(); r = cu.cuOccupancyMaxActiveClusters(ctypes.byref(n), f, ctypes.byref(cfg))
    nb = ctypes.c_int(); cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(nb), f, threads, 0)
    print(path, name, "cluster", c, "max active clusters", n.value, "rc", r, "blocks/SM", nb.value)
