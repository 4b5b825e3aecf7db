/* FAKE_NVML_GPUS="NVIDIA A10G:24;NVIDIA A10G:24" (name:GiB); FAKE_NVML_FAIL=1 -> init returns 9 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
static int n; static char names[16][96]; static unsigned long long mem[16]; static int idx[16];
static void load(void){ n=0; const char*s=getenv("FAKE_NVML_GPUS"); if(!s) return;
  char buf[2048]; strncpy(buf,s,sizeof buf-1); buf[sizeof buf-1]=0;
  for(char*tok=strtok(buf,";"); tok && n<16; tok=strtok(NULL,";")){ char*c=strrchr(tok,':');
    if(c){*c=0; mem[n]=strtoull(c+1,0,10)<<30;} else mem[n]=16ULL<<30;
    snprintf(names[n],96,"%s",tok); idx[n]=n; n++; } }
int nvmlInitWithFlags(unsigned f){ (void)f; if(getenv("FAKE_NVML_FAIL")) return 9; load(); return 0; }
int nvmlInit_v2(void){ return nvmlInitWithFlags(0); }
int nvmlInit(void){ return nvmlInitWithFlags(0); }
int nvmlShutdown(void){ return 0; }
const char* nvmlErrorString(int r){ switch(r){case 0:return "Success";case 9:return "Driver Not Loaded";case 2:return "Invalid Argument";default:return "Unknown Error";} }
static int str(char*b,unsigned l,const char*s){ if(!b||l<=strlen(s)) return 7; strcpy(b,s); return 0; }
int nvmlSystemGetDriverVersion(char*b,unsigned l){ const char*v=getenv("FAKE_NVML_DRIVER"); return str(b,l,v?v:"550.127.05"); }
int nvmlSystemGetNVMLVersion(char*b,unsigned l){ return str(b,l,"12.550.127.05"); }
int nvmlSystemGetCudaDriverVersion(int*v){ *v=12040; return 0; }
int nvmlSystemGetCudaDriverVersion_v2(int*v){ *v=12040; return 0; }
int nvmlDeviceGetCount_v2(unsigned*c){ *c=n; return 0; }
int nvmlDeviceGetCount(unsigned*c){ *c=n; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void**h){ if(i>=(unsigned)n) return 2; *h=&idx[i]; return 0; }
int nvmlDeviceGetHandleByIndex(unsigned i, void**h){ return nvmlDeviceGetHandleByIndex_v2(i,h); }
#define I(h) (*(int*)(h))
int nvmlDeviceGetName(void*h,char*b,unsigned l){ return str(b,l,names[I(h)]); }
int nvmlDeviceGetUUID(void*h,char*b,unsigned l){ char u[80]; snprintf(u,80,"GPU-00000000-0000-0000-0000-%012d",I(h)); return str(b,l,u); }
int nvmlDeviceGetMemoryInfo(void*h,nvmlMemory_t*m){ m->total=mem[I(h)]; m->used=0; m->free=m->total; return 0; }
static unsigned long long num(const char*,int,unsigned long long);
int nvmlDeviceGetUtilizationRates(void*h,nvmlUtilization_t*u){ u->gpu=(unsigned)num("FAKE_NVML_UTIL",I(h),0); u->memory=0; return 0; }
int nvmlDeviceGetTemperature(void*h,int s,unsigned*t){ (void)s; *t=(unsigned)num("FAKE_NVML_TEMP",I(h),35); return 0; }
int nvmlDeviceGetCudaComputeCapability(void*h,int*a,int*b){ (void)h; const char*c=getenv("FAKE_NVML_CC"); *a=8; *b=6; if(c) sscanf(c,"%d.%d",a,b); return 0; }

/* ---- Additions for the smoke job's health checks (provision issue 6). Each reads an env knob so
   a test can inject one fault; per-GPU values are ';'-separated like FAKE_NVML_GPUS.
   FAKE_NVML_UTIL=97                     utilization % (all GPUs)
   FAKE_NVML_ECC_UNCORRECTED=0;3         volatile uncorrected ECC errors per GPU
   FAKE_NVML_RETIRED_PENDING=0;1         retired pages pending
   FAKE_NVML_ROWREMAP="0,0,0,0;0,1,1,0"  corrected,uncorrected,pending,failure per GPU
   FAKE_NVML_THROTTLE=0;0x40             current clock-event reasons bitmask per GPU
   FAKE_NVML_PCIE="5x16/5x16;3x8/5x16"   current gen x width / max gen x width per GPU
   FAKE_NVML_PERSISTENCE=1;0             persistence mode per GPU
   FAKE_NVML_TEMP=35;95                  temperature per GPU; FAKE_NVML_CC=9.0 compute capability */
static const char* field(const char* env, int i, char* out, size_t len){
  const char* s=getenv(env); if(!s) return NULL; int k=0; const char* p=s;
  while(k<i){ const char* q=strchr(p,';'); if(!q) break; p=q+1; k++; }
  size_t m=strcspn(p,";"); if(m>=len) m=len-1; memcpy(out,p,m); out[m]=0; return out; }
static unsigned long long num(const char* env, int i, unsigned long long dflt){
  char b[64]; return field(env,i,b,sizeof b) ? strtoull(b,0,0) : dflt; }
int nvmlDeviceGetTotalEccErrors(void*h,int type,int counter,unsigned long long*c){
  (void)counter; *c = type==1 ? num("FAKE_NVML_ECC_UNCORRECTED",I(h),0) : 0; return 0; }
int nvmlDeviceGetEccMode(void*h,int*cur,int*pend){ (void)h; *cur=1; *pend=1; return 0; }
int nvmlDeviceGetRetiredPagesPendingStatus(void*h,int*p){ *p=(int)num("FAKE_NVML_RETIRED_PENDING",I(h),0); return 0; }
int nvmlDeviceGetRemappedRows(void*h,unsigned*c,unsigned*u,unsigned*p,unsigned*f){
  char b[64]; *c=*u=*p=*f=0; if(field("FAKE_NVML_ROWREMAP",I(h),b,sizeof b)) sscanf(b,"%u,%u,%u,%u",c,u,p,f); return 0; }
int nvmlDeviceGetCurrentClocksEventReasons(void*h,unsigned long long*r){ *r=num("FAKE_NVML_THROTTLE",I(h),0); return 0; }
int nvmlDeviceGetCurrentClocksThrottleReasons(void*h,unsigned long long*r){ return nvmlDeviceGetCurrentClocksEventReasons(h,r); }
static void pcie(void*h,unsigned*cg,unsigned*cw,unsigned*mg,unsigned*mw){
  char b[64]; *cg=*mg=4; *cw=*mw=16; if(field("FAKE_NVML_PCIE",I(h),b,sizeof b)) sscanf(b,"%ux%u/%ux%u",cg,cw,mg,mw); }
int nvmlDeviceGetCurrPcieLinkGeneration(void*h,unsigned*v){ unsigned a,b,c,d; pcie(h,&a,&b,&c,&d); *v=a; return 0; }
int nvmlDeviceGetCurrPcieLinkWidth(void*h,unsigned*v){ unsigned a,b,c,d; pcie(h,&a,&b,&c,&d); *v=b; return 0; }
int nvmlDeviceGetMaxPcieLinkGeneration(void*h,unsigned*v){ unsigned a,b,c,d; pcie(h,&a,&b,&c,&d); *v=c; return 0; }
int nvmlDeviceGetGpuMaxPcieLinkGeneration(void*h,unsigned*v){ return nvmlDeviceGetMaxPcieLinkGeneration(h,v); }
int nvmlDeviceGetMaxPcieLinkWidth(void*h,unsigned*v){ unsigned a,b,c,d; pcie(h,&a,&b,&c,&d); *v=d; return 0; }
int nvmlDeviceGetPersistenceMode(void*h,int*m){ *m=(int)num("FAKE_NVML_PERSISTENCE",I(h),1); return 0; }
int nvmlDeviceGetTemperatureThreshold(void*h,int t,unsigned*v){ (void)h; *v = t==1 ? 87 : 92; return 0; }
